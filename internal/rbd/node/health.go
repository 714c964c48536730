package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeHealth implements csi.NodeServer (alpha in CSI 1.13, where it replaced
// NodeGetVolumeStats' volume_condition). A volume whose attachment broke — the rbd-fuse or
// rbd-nbd daemon died, the device vanished, the staging mount is gone — is INACCESSIBLE from
// this node; the reason names which.
func (s *Server) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, nodereq.Missing("volume_id")
	}
	for field, p := range map[string]string{"volume_publish_path": req.GetVolumePublishPath(), "staging_target_path": req.GetStagingTargetPath()} {
		if p != "" {
			if _, err := nodereq.AbsPath(field, p); err != nil {
				return nil, err
			}
		}
	}
	rec, err := s.findRecord(req.GetVolumeId(), req.GetStagingTargetPath())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", req.GetVolumeId())
	}
	reason, msg := s.check(ctx, rec, req.GetVolumePublishPath())
	return nodereq.Health(rec.VolumeID, reason, msg), nil
}

// check returns a CamelCase reason and a message when the staged volume does not work.
func (s *Server) check(ctx context.Context, rec *record, publishPath string) (reason, msg string) {
	if rec.State != stateStaged {
		return "NotStaged", "staging did not complete"
	}
	attacher, ok := s.attachers[rec.Mounter]
	if !ok {
		return "Unknown", fmt.Sprintf("unknown mounter %q", rec.Mounter)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := attacher.Check(ctx, rec.Attachment); err != nil {
		var u *attach.Unhealthy
		if errors.As(err, &u) {
			return u.Reason, u.Error()
		}
		return "Unknown", err.Error()
	}
	if !rec.Block {
		if m, err := hostmount.MountAt(rec.StagingPath); err == nil && m == nil {
			return "NotMounted", fmt.Sprintf("nothing is mounted at the staging path %s", rec.StagingPath)
		}
	}
	if publishPath != "" {
		if m, err := hostmount.MountAt(publishPath); err == nil && m == nil {
			return "NotPublished", fmt.Sprintf("nothing is mounted at %s", publishPath)
		}
	}
	return "", ""
}
