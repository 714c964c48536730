package node

import (
	"context"
	"time"

	identitypb "github.com/csi-addons/spec/lib/go/identity"
	rspb "github.com/csi-addons/spec/lib/go/reclaimspace"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ReclaimSpace is the csi-addons ReclaimSpaceNode service of an RBD node: it trims the
// filesystem of a staged volume (fstrim), whose discards reach the image as rbd_discard
// (on the fuse mounter the image's FUSE server turns the loop device's hole punches into
// them; krbd and rbd-nbd pass discards on themselves), so the RADOS objects of deleted
// files are given back while the volume stays mounted.
type ReclaimSpace struct {
	rspb.UnimplementedReclaimSpaceNodeServer
	s *Server
}

// ReclaimSpace returns the csi-addons ReclaimSpaceNode service of s.
func (s *Server) ReclaimSpace() *ReclaimSpace { return &ReclaimSpace{s: s} }

// Register adds the service to a gRPC server.
func (r *ReclaimSpace) Register(g grpc.ServiceRegistrar) {
	rspb.RegisterReclaimSpaceNodeServer(g, r)
}

// Capabilities are the service's: online reclaim (the volume stays in use).
func (*ReclaimSpace) Capabilities() []*identitypb.Capability {
	return []*identitypb.Capability{{Type: &identitypb.Capability_ReclaimSpace_{ReclaimSpace: &identitypb.Capability_ReclaimSpace{
		Type: identitypb.Capability_ReclaimSpace_ONLINE}}}}
}

// NodeReclaimSpace trims the filesystem a volume is staged with. The filesystem is found
// through the volume's staging record (the staging path is where it is mounted; volume_path is
// a bind mount of it), never by trusting a path of the request. Nothing is done, successfully,
// for a volume staged read-only (nothing was deleted through it) or as a raw block device:
// only its user knows which ranges are free, and its own discards (blkdiscard, a filesystem
// of its own mounted with discard) reach the image already; a blkdiscard of the whole device
// here would destroy its data. (ceph-csi answers UNIMPLEMENTED for block volumes, which makes
// every ReclaimSpaceJob of one fail.)
func (r *ReclaimSpace) NodeReclaimSpace(ctx context.Context, req *rspb.NodeReclaimSpaceRequest) (*rspb.NodeReclaimSpaceResponse, error) {
	pr, err := nodereq.ParsePath(req.GetVolumeId(), "volume_path", req.GetVolumePath(), req.GetStagingTargetPath(), req.GetStagingTargetPath() == "")
	if err != nil {
		return nil, err
	}
	s := r.s
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeReclaimSpace", pr.VolumeID, "volumePath", pr.VolumePath)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := s.findRecord(pr.VolumeID, pr.StagingPath)
	if err == nil && rec == nil && pr.StagingPath != "" {
		// the csi-addons sidecar computes the staging path from its --stagingpath and the
		// kubelet's layout; the volume's own index knows where it is staged
		rec, err = s.findRecord(pr.VolumeID, "")
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil || rec.State != stateStaged {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", pr.VolumeID)
	}
	if rec.Block || rec.ReadOnly {
		log.V(2).Info("Nothing to reclaim on the node: the volume is a raw block device or read-only", "block", rec.Block, "readOnly", rec.ReadOnly)
		return &rspb.NodeReclaimSpaceResponse{}, nil
	}
	m, err := hostmount.MountAt(rec.StagingPath)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the mount table: %v", err)
	}
	if m == nil {
		// fstrim there would trim the filesystem underneath, not the volume's
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at its staging path %s", pr.VolumeID, rec.StagingPath)
	}
	start := time.Now()
	// bounded by Options.FilesystemTimeout: trimming a large, fragmented filesystem takes as
	// long as checking it
	out, err := s.fsx.Run(ctx, "fstrim", "-v", rec.StagingPath)
	if err != nil {
		return nil, errorStatus("trimming the filesystem at "+rec.StagingPath, err)
	}
	log.V(2).Info("Filesystem trimmed", "stagingPath", rec.StagingPath, "output", string(out), "duration", time.Since(start))
	return &rspb.NodeReclaimSpaceResponse{}, nil
}
