package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// resizeWait bounds how long NodeExpandVolume waits for the device to show required_bytes.
const resizeWait = 10 * time.Second

// NodeExpandVolume implements csi.NodeServer: after ControllerExpandVolume grew the image,
// make the device show the new size and grow the filesystem on it. Block volumes have nothing
// to grow; their new size is returned.
func (s *Server) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	r, err := nodereq.ParsePath(req.GetVolumeId(), "volume_path", req.GetVolumePath(), req.GetStagingTargetPath(), true)
	if err != nil {
		return nil, err
	}
	required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
	if required < 0 || limit < 0 || (limit > 0 && limit < required) {
		return nil, status.Errorf(codes.OutOfRange, "capacity_range: required_bytes %d, limit_bytes %d", required, limit)
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeExpandVolume", r.VolumeID, "volumePath", r.VolumePath)
	if err != nil {
		return nil, err
	}
	defer unlock()
	start := time.Now()

	rec, err := s.findRecord(r.VolumeID, r.StagingPath)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil || rec.State != stateStaged {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", r.VolumeID)
	}
	statCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	_, err = hostmount.StatWithin(statCtx, r.VolumePath)
	cancel()
	if hostmount.Unresponsive(err) {
		return nil, pathStatus("volume_path", err)
	}
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume_path %q: %v", r.VolumePath, err)
	}
	attacher, ok := s.attachers[rec.Mounter]
	if !ok {
		return nil, status.Errorf(codes.Internal, "staging record names unknown mounter %q", rec.Mounter)
	}
	// the controller has grown the image, but the attachment learns it a moment later (librbd's
	// header watch); a size that has not come by then is not coming
	waitCtx, cancel := context.WithTimeout(ctx, min(s.opts.Timeout, resizeWait))
	size, err := attacher.Refresh(waitCtx, rec.Attachment, required)
	cancel()
	if err != nil {
		if required > 0 && size > 0 && size < required && ctx.Err() == nil {
			return nil, status.Errorf(codes.OutOfRange, "the image is %d bytes, less than required_bytes %d: ControllerExpandVolume must grow it first", size, required)
		}
		return nil, errorStatus("refreshing the size of "+rec.Attachment.Device, err)
	}
	if !rec.Block && !rec.ReadOnly {
		// resize2fs works on the device; xfs_growfs needs the mount point, the staging path
		if _, err := s.resizer(ctx).Resize(rec.Attachment.Device, rec.StagingPath); err != nil {
			if strings.Contains(err.Error(), "Permission denied to resize") {
				// resize2fs' words for EPERM from the online-resize ioctl
				err = fmt.Errorf("%w (growing a mounted ext4 filesystem needs CAP_SYS_RESOURCE)", err)
			}
			return nil, errorStatus("growing the filesystem", err)
		}
	}
	log.V(2).Info("Volume expanded", "bytes", size, "duration", time.Since(start))
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
