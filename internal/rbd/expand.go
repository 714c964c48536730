package rbd

import (
	"context"
	"errors"

	"github.com/ceph/go-ceph/rados"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// openedVolume is a volume openVolume found: its ID (of either format) and its image's name.
type openedVolume struct {
	id    volumeID
	image string
}

// openVolume resolves a volume ID of either format to its location and image, and checks the
// image exists (a hidden deleted volume does not). The caller releases the connection.
func (c *Controller) openVolume(ctx context.Context, raw string, secrets map[string]string) (radosop.Location, openedVolume, imageState, error) {
	id, err := parseVolumeID(raw)
	if err != nil {
		return radosop.Location{}, openedVolume{}, imageState{}, controller.NotFoundf("volume %q does not exist", raw)
	}
	v := openedVolume{id: id}
	var p radosop.Location
	if id.CSI != nil {
		if p, v.image, err = c.openCSIVolume(ctx, *id.CSI, secrets); err != nil {
			return radosop.Location{}, v, imageState{}, err
		}
	} else {
		cl, err := c.idCluster(id.Own.ClusterID, codes.NotFound, "volume_id")
		if err != nil {
			return radosop.Location{}, v, imageState{}, err
		}
		if p, _, err = c.locate(ctx, cl, id.Own.PoolID, id.Own.Namespace, secrets); err != nil {
			return radosop.Location{}, v, imageState{}, orNotFound(err, "volume "+raw)
		}
		v.image = rbdname.Image(id.Own.UID)
	}
	st, err := radosop.With(ctx, p, "inspect volume", func(io *rados.IOContext) (imageState, error) {
		return inspect(io, v.image)
	})
	if err == nil && (!st.exists || st.deleted) {
		err = controller.NotFoundf("volume %q does not exist", raw)
	}
	if err != nil {
		p.Conn.Release()
		return radosop.Location{}, v, st, err
	}
	return p, v, st, nil
}

// ControllerExpandVolume grows the image; it never shrinks. A filesystem volume then needs the
// node to grow its filesystem.
func (c *Controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	size, err := controller.CheckExpand(req, support)
	if err != nil {
		return nil, err
	}
	raw := req.GetVolumeId()
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "ControllerExpandVolume", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p, v, st, err := c.openVolume(ctx, raw, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	nodeExpand := req.GetVolumeCapability().GetBlock() == nil
	// an encrypted image is larger than its volume by the LUKS header (see ensureEncrypted)
	enc, err := imageEncryption(ctx, p, v.image)
	if err != nil {
		return nil, err
	}
	var header uint64
	if enc != nil {
		header = enc.HeaderBytes
	}
	if int64(st.size-header) >= size {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(st.size - header), NodeExpansionRequired: nodeExpand}, nil
	}
	_, err = radosop.With(ctx, p, "resize", func(io *rados.IOContext) (struct{}, error) {
		return struct{}{}, resize(io, v.image, uint64(size)+header)
	})
	if errors.Is(err, ceph.ErrNoSpace) {
		return nil, status.Errorf(codes.OutOfRange, "cannot grow volume to %d bytes: %v", size, err)
	}
	if err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size, NodeExpansionRequired: nodeExpand}, nil
}

// ValidateVolumeCapabilities confirms the capabilities this driver can serve for an existing
// volume.
func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := controller.CheckValidate(req); err != nil {
		return nil, err
	}
	p, _, _, err := c.openVolume(ctx, req.GetVolumeId(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	p.Conn.Release()
	if reason := support.Check(req.GetVolumeCapabilities()); reason != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: reason}, nil
	}
	if _, err := parseVolumeParams(withDefaults(req.GetParameters())); len(req.GetParameters()) > 0 && err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// withDefaults lets parameters be checked for unknown keys and bad values without requiring
// the keys CreateVolume requires.
func withDefaults(p map[string]string) map[string]string {
	out := map[string]string{paramClusterID: "x", paramPool: "x"}
	for k, v := range p {
		out[k] = v
	}
	return out
}

// GetCapacity reports the pool's max_avail from `ceph df`. The request carries no secrets, so it
// asks as the user the StorageClass's CreateVolume calls carry (controller.ClassUsers).
func (c *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if caps := req.GetVolumeCapabilities(); len(caps) > 0 {
		if support.Check(caps) != "" {
			return &csi.GetCapacityResponse{AvailableCapacity: 0}, nil
		}
	}
	params := req.GetParameters()
	clusterID, pool := params[paramClusterID], params[paramPool]
	if clusterID == "" || pool == "" {
		// without a pool there is no capacity to report; 0 tells the CO nothing fits here
		return &csi.GetCapacityResponse{}, nil
	}
	cl, err := c.Cluster(clusterID, codes.InvalidArgument, `parameters["clusterID"]`)
	if err != nil {
		return nil, err
	}
	conn, err := c.ConnectAsClass(ctx, cl, params)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	avail, err := ceph.PoolMaxAvail(ctx, conn, pool)
	if err != nil {
		return nil, err
	}
	return &csi.GetCapacityResponse{AvailableCapacity: avail}, nil
}
