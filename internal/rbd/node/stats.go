package node

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats implements csi.NodeServer: bytes and inodes of the filesystem mounted at
// volume_path, or the size of the block device published there. It takes no volume lock:
// statistics must not fail because an expansion is running.
func (s *Server) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	r, err := nodereq.ParsePath(req.GetVolumeId(), "volume_path", req.GetVolumePath(), req.GetStagingTargetPath(), true)
	if err != nil {
		return nil, err
	}
	// bounded, one call per path at a time: a volume path that stopped answering (a stuck
	// FUSE daemon under it) must not take one more thread with every poll
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	fi, err := hostmount.StatWithin(ctx, r.VolumePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume_path %q does not exist", r.VolumePath)
	}
	if err != nil {
		return nil, pathStatus("volume_path", err)
	}
	m, err := hostmount.MountAt(r.VolumePath)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "reading the mount table: %v", err)
	}
	if m == nil {
		return nil, status.Errorf(codes.NotFound, "volume_path %q is not a mount", r.VolumePath)
	}
	rec, err := s.findRecord(r.VolumeID, r.StagingPath)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", r.VolumeID)
	}

	if fi.Mode()&os.ModeDevice != 0 {
		size, err := attach.DeviceSize(r.VolumePath)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "size of %s: %v", r.VolumePath, err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}, nil
	}
	st, err := hostmount.StatfsWithin(ctx, r.VolumePath)
	if err != nil {
		return nil, pathStatus("volume_path", err)
	}
	bsize := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{
			Unit:      csi.VolumeUsage_BYTES,
			Total:     int64(st.Blocks) * bsize,
			Available: int64(st.Bavail) * bsize,
			Used:      int64(st.Blocks-st.Bfree) * bsize,
		},
		{
			Unit:      csi.VolumeUsage_INODES,
			Total:     int64(st.Files),
			Available: int64(st.Ffree),
			Used:      int64(st.Files - st.Ffree),
		},
	}}, nil
}

// pathStatus is the status of a failed bounded filesystem call (hostmount) on a path the
// request names: UNAVAILABLE when the filesystem there does not answer.
func pathStatus(field string, err error) error {
	if hostmount.Unresponsive(err) {
		return status.Errorf(codes.Unavailable, "%s does not answer: %v", field, err)
	}
	return status.Errorf(codes.Internal, "%s: %v", field, err)
}
