package rbd

import (
	"context"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/radosop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// ControllerModifyVolume sets the volume's QoS to exactly the mutable parameters given (see
// qos.go): the parameters are checked before anything changes, so a bad class changes nothing.
func (c *Controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	q, err := parseQoS(req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "ControllerModifyVolume", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, v, _, err := c.openVolume(ctx, raw, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	if err := setQoS(ctx, p, v.image, q); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Volume modified", "image", p.String()+"/"+v.image, "qos", q)
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// setQoS applies q to image name at p.
func setQoS(ctx context.Context, p radosop.Location, name string, q qos) error {
	_, err := radosop.With(ctx, p, "set QoS of "+name, func(io *rados.IOContext) (struct{}, error) {
		img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
		if err != nil {
			return struct{}{}, err
		}
		defer img.Close()
		return struct{}{}, q.apply(img)
	})
	return err
}
