package cephfs

import (
	"context"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/volcap"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Volumes ceph-csi created: subvolume <prefix><uuid> (csi.imagename) in the cluster's subvolume
// group, journal entry csi.volume.<uuid> in the filesystem's metadata pool (the namespace both
// drivers default to, "csi"), handle naming the filesystem's ID. A shallow read-only volume has
// no subvolume: its entry names the snapshot it exposes (csi.volume.backingsnapshotid), and it
// holds a reference in ceph-csi's tracker of that snapshot under its would-be subvolume name.

func (c *Controller) instance() string { return c.opts.CephCSIInstanceID }

// csiVolume reads a ceph-csi volume's entry; missing (or never finished) is NOT_FOUND.
func (c *Controller) csiVolume(ctx context.Context, s site, h volid.Handle, what string) (*cephcsi.Entry, error) {
	e, err := cephcsi.Read(ctx, s.journal(), cephcsi.Volumes, h.UUID)
	if err != nil {
		return nil, err
	}
	if e == nil || e.Name == "" {
		return nil, controller.NotFoundf("%s does not exist", what)
	}
	return e, nil
}

// refuseEncrypted is the answer for a volume ceph-csi encrypted (fscrypt): monoceph has no
// encryption, and mounting its ciphertext as plain files would be worse than refusing.
func refuseEncrypted(e *cephcsi.Entry, what string) error {
	if !e.Encrypted() {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s is encrypted by ceph-csi (KMS %q): monoceph does not support encryption",
		what, e.Attrs[cephcsi.KeyEncryptKMS])
}

// quota is a subvolume's quota, 0 when it has none or is gone (removed with retained
// snapshots, whose info has no quota).
func quota(s site, group, sub string) (int64, error) {
	info, err := s.admin.SubVolumeInfo(s.fs.Name, group, sub)
	if isNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, ceph.Wrap("info of subvolume "+sub, err)
	}
	if n, ok := info.BytesQuota.(admin.ByteCount); ok {
		return int64(n), nil
	}
	return 0, nil
}

// deleteCSIVolume removes a ceph-csi volume: its subvolume (keeping snapshots, like monoceph's
// own), or for a shallow volume its reference, and with the last reference of a deleted
// snapshot the snapshot; then its journal entry.
func (c *Controller) deleteCSIVolume(ctx context.Context, req *csi.DeleteVolumeRequest, h volid.Handle) (*csi.DeleteVolumeResponse, error) {
	ctx, s, done, gone, err := c.deletionSite(ctx, "DeleteVolume", "volume_id", h.ClusterID, h.LocationID, h.String(), req.GetSecrets())
	if err != nil || gone {
		return &csi.DeleteVolumeResponse{}, err
	}
	defer done()
	e, err := cephcsi.Read(ctx, s.journal(), cephcsi.Volumes, h.UUID)
	if err != nil || e == nil {
		return &csi.DeleteVolumeResponse{}, err
	}
	if snap := e.Attrs[cephcsi.KeyBackingSnapshot]; snap != "" {
		if err := c.unrefCSISnapshot(ctx, s, snap, e.ImageName()); err != nil {
			return nil, err
		}
	} else {
		if err := cancelClone(s, s.group, e.ImageName()); err != nil {
			return nil, err
		}
		if err := removeSubvolumeRetaining(s, s.group, e.ImageName()); err != nil {
			return nil, err
		}
	}
	faultpoint.Hit("cephfs.DeleteCephCSIVolume.subvolume")
	if err := cephcsi.Release(ctx, s.journal(), c.instance(), e); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("ceph-csi volume deleted", "volume", h.String(), "subvolume", s.group+"/"+e.ImageName())
	return &csi.DeleteVolumeResponse{}, nil
}

// openCSIVolume resolves a ceph-csi volume handle for expand and validate. The caller
// releases the site.
func (c *Controller) openCSIVolume(ctx context.Context, h volid.Handle, secrets map[string]string) (site, *cephcsi.Entry, error) {
	what := "volume " + h.String()
	cl, err := c.Cluster(h.ClusterID, codes.NotFound, "volume_id")
	if err != nil {
		return site{}, nil, err
	}
	s, err := c.siteOf(ctx, cl, h.LocationID, secrets, what)
	if err != nil {
		return site{}, nil, err
	}
	e, err := c.csiVolume(ctx, s, h, what)
	if err == nil {
		err = refuseEncrypted(e, what)
	}
	if err != nil {
		s.release()
		return site{}, nil, err
	}
	return s, e, nil
}

// expandCSIVolume raises a ceph-csi volume's quota.
func (c *Controller) expandCSIVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest, h volid.Handle, size int64) (*csi.ControllerExpandVolumeResponse, error) {
	s, e, err := c.openCSIVolume(ctx, h, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer s.release()
	if e.Attrs[cephcsi.KeyBackingSnapshot] != "" {
		return nil, status.Errorf(codes.InvalidArgument, "volume_id %q is a shallow read-only volume: it cannot be expanded", h.String())
	}
	sub := e.ImageName()
	cur, err := quota(s, s.group, sub)
	if err != nil {
		return nil, err
	}
	if cur >= size {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: cur}, nil
	}
	if _, err := s.admin.ResizeSubVolume(s.fs.Name, s.group, sub, admin.ByteCount(size), true); err != nil {
		return nil, controllerErr("resize "+sub, err, h.String())
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: size}, nil
}

// validateCSIVolume is ValidateVolumeCapabilities of a ceph-csi volume.
func (c *Controller) validateCSIVolume(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest, h volid.Handle) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	s, e, err := c.openCSIVolume(ctx, h, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer s.release()
	shallow := e.Attrs[cephcsi.KeyBackingSnapshot] != ""
	if !shallow {
		if _, err := s.admin.SubVolumePath(s.fs.Name, s.group, e.ImageName()); err != nil {
			return nil, controllerErr("get path", err, h.String())
		}
	}
	return confirm(req, shallow), nil
}

// confirm answers ValidateVolumeCapabilities for an existing volume.
func confirm(req *csi.ValidateVolumeCapabilitiesRequest, shallow bool) *csi.ValidateVolumeCapabilitiesResponse {
	if reason := support.Check(req.GetVolumeCapabilities()); reason != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: reason}
	}
	if shallow && !volcap.ReadOnly(req.GetVolumeCapabilities()) {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "a shallow volume is read-only: only *_READER_ONLY access modes"}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}
}

// controllerErr is NOT_FOUND naming the volume for a Ceph "not found", other errors wrapped.
func controllerErr(op string, err error, volumeID string) error {
	if isNotFound(err) {
		return controller.NotFoundf("volume %q does not exist", volumeID)
	}
	return ceph.Wrap(op, err)
}

// csiSource resolves a ceph-csi content source for a clone: a snapshot, a regular volume (a
// transient snapshot of it is cut), or a shallow volume (its snapshot).
func (c *Controller) csiSource(ctx context.Context, s site, src source) (sourceInfo, error) {
	if src.Vol != nil {
		h := *src.Vol.CSI
		what := "source volume " + h.String()
		e, err := c.csiVolume(ctx, s, h, what)
		if err != nil {
			return sourceInfo{}, err
		}
		if err := refuseEncrypted(e, what); err != nil {
			return sourceInfo{}, err
		}
		if snap := e.Attrs[cephcsi.KeyBackingSnapshot]; snap != "" {
			b, err := c.csiBacking(ctx, s, snap, what)
			return sourceInfo{group: b.group, subvolume: b.subvolume, snapshot: b.snapshot, size: b.size}, err
		}
		size, err := quota(s, s.group, e.ImageName())
		return sourceInfo{group: s.group, subvolume: e.ImageName(), size: size, transient: true}, err
	}
	b, err := c.csiBacking(ctx, s, src.Snap.CSI.String(), "source snapshot "+src.Snap.CSI.String())
	return sourceInfo{group: b.group, subvolume: b.subvolume, snapshot: b.snapshot, size: b.size}, err
}

// modifyCSIVolume sets a ceph-csi volume's pins to exactly the mutable parameters given. Its
// journal has no record of pins applied, so all three are set every time (idempotent).
func (c *Controller) modifyCSIVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest, h volid.Handle, want pins) (*csi.ControllerModifyVolumeResponse, error) {
	s, e, err := c.openCSIVolume(ctx, h, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer s.release()
	if e.Attrs[cephcsi.KeyBackingSnapshot] != "" {
		return nil, status.Errorf(codes.InvalidArgument, "mutable_parameters: volume %q is a shallow read-only volume of a snapshot; it has no subvolume to pin", h.String())
	}
	if err := checkPins(ctx, s, want); err != nil {
		return nil, err
	}
	if err := setPins(ctx, s, s.group, e.ImageName(), want); err != nil {
		return nil, controllerErr("pin "+e.ImageName(), err, h.String())
	}
	klog.FromContext(ctx).V(2).Info("ceph-csi volume pins set", "subvolume", s.fs.Name+"/"+s.group+"/"+e.ImageName(), "pins", want.String())
	return &csi.ControllerModifyVolumeResponse{}, nil
}
