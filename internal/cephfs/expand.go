package cephfs

import (
	"context"
	"strconv"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// openVolume resolves a volume ID to its site and ready reservation. The caller releases the
// connection.
func (c *Controller) openVolume(ctx context.Context, raw string, secrets map[string]string) (site, *journal.Record, error) {
	id, err := volid.ParseCephFSVolume(raw)
	if err != nil {
		return site{}, nil, controller.NotFoundf("volume %q does not exist", raw)
	}
	cl, err := c.Cluster(id.ClusterID, codes.NotFound, "volume_id")
	if err != nil {
		return site{}, nil, err
	}
	s, err := c.siteOf(ctx, cl, id.FSCID, secrets, "volume "+raw)
	if err != nil {
		return site{}, nil, err
	}
	rec, err := journal.Get(ctx, s.journal(), journal.Volume, id.UID)
	if err == nil && (rec == nil || rec.Attrs[attrState] != stateReady) {
		err = controller.NotFoundf("volume %q does not exist", raw)
	}
	if err != nil {
		s.release()
		return site{}, nil, err
	}
	return s, rec, nil
}

// ControllerExpandVolume raises the subvolume's quota; it never shrinks, and the node has
// nothing to do (a quota change is seen by every mount at once).
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
	if id, err := parseVolumeID(raw); err == nil && id.CSI != nil {
		return c.expandCSIVolume(ctx, req, *id.CSI, size)
	}
	s, rec, err := c.openVolume(ctx, raw, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer s.release()
	if rec.Attrs[attrKind] == kindShallow {
		return nil, status.Errorf(codes.InvalidArgument, "volume_id %q is a shallow read-only volume: it cannot be expanded", raw)
	}
	cur, _ := strconv.ParseInt(rec.Attrs[attrSize], 10, 64)
	if cur >= size {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: cur}, nil
	}
	if _, err := s.admin.ResizeSubVolume(s.fs.Name, rec.Attrs[attrGroup], subvolumeName(rec.UID), admin.ByteCount(size), true); err != nil {
		return nil, ceph.Wrap("resize", err)
	}
	rec.Attrs[attrSize] = strconv.FormatInt(size, 10)
	if err := journal.SetAttrs(ctx, s.journal(), journal.Volume, rec); err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
}

// ValidateVolumeCapabilities confirms what this driver can serve for an existing volume.
func (c *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if err := controller.CheckValidate(req); err != nil {
		return nil, err
	}
	if id, err := parseVolumeID(req.GetVolumeId()); err == nil && id.CSI != nil {
		return c.validateCSIVolume(ctx, req, *id.CSI)
	}
	s, rec, err := c.openVolume(ctx, req.GetVolumeId(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer s.release()
	if rec.Attrs[attrKind] != kindShallow {
		if _, err := s.admin.SubVolumePath(s.fs.Name, rec.Attrs[attrGroup], subvolumeName(rec.UID)); err != nil {
			if isNotFound(err) {
				return nil, controller.NotFoundf("volume %q does not exist", req.GetVolumeId())
			}
			return nil, ceph.Wrap("get path", err)
		}
	}
	return confirm(req, rec.Attrs[attrKind] == kindShallow), nil
}

// GetCapacity reports max_avail of the filesystem's first data pool (or the pool parameter),
// as the user the StorageClass's CreateVolume calls carry: the request carries no secrets.
func (c *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	if caps := req.GetVolumeCapabilities(); len(caps) > 0 && support.Check(caps) != "" {
		return &csi.GetCapacityResponse{}, nil
	}
	p := req.GetParameters()
	if p[paramClusterID] == "" || p[paramFSName] == "" {
		return &csi.GetCapacityResponse{}, nil
	}
	cl, err := c.Cluster(p[paramClusterID], codes.InvalidArgument, `parameters["clusterID"]`)
	if err != nil {
		return nil, err
	}
	conn, err := c.ConnectAsClass(ctx, cl, p)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	pool := p[paramPool]
	if pool == "" {
		fs, err := c.fss.lookup(ctx, cl.ClusterID, conn, p[paramFSName], -1)
		if err != nil {
			return nil, err
		}
		if len(fs.DataPools) == 0 {
			return &csi.GetCapacityResponse{}, nil
		}
		pool = fs.DataPools[0]
	}
	avail, err := ceph.PoolMaxAvail(ctx, conn, pool)
	if err != nil {
		return nil, err
	}
	return &csi.GetCapacityResponse{AvailableCapacity: avail}, nil
}
