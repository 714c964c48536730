package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodePublishVolume implements csi.NodeServer: bind mount the staged filesystem at the target
// directory, or the staged device at a target file. Read-only comes from the readonly flag or
// a reader-only access mode. For a block volume a read-only bind mount would not stop writes
// through the device node, so a read-only loop device is layered on the staged device instead.
func (s *Server) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	r, err := parsePublish(req)
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodePublishVolume", r.volumeID, "targetPath", r.targetPath)
	if err != nil {
		return nil, err
	}
	defer unlock()

	rec, err := s.loadRecord(r.stagingPath)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil || rec.VolumeID != r.volumeID || rec.State != stateStaged {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %q", r.volumeID, r.stagingPath)
	}
	if rec.Block != r.access.block {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is staged for %s access, not %s", r.volumeID, accessType(rec.Block), accessType(r.access.block))
	}
	readOnly := r.readOnly || rec.ReadOnly
	if rec.Block {
		err = s.publishBlock(ctx, rec, r.targetPath, readOnly)
	} else {
		err = s.publishMount(ctx, rec, r.targetPath, readOnly)
	}
	if err != nil {
		return nil, err
	}
	log.V(2).Info("Volume published", "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

func (s *Server) publishMount(ctx context.Context, rec *record, target string, readOnly bool) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Errorf(codes.Internal, "target_path: %v", err)
	}
	m, err := hostmount.MountAt(target)
	if err != nil {
		return status.Errorf(codes.Internal, "reading the mount table: %v", err)
	}
	if m != nil {
		staged, err := hostmount.MountAt(rec.StagingPath)
		if err != nil {
			return status.Errorf(codes.Internal, "reading the mount table: %v", err)
		}
		if hostmount.SameFilesystem(m, staged) && m.Root == staged.Root && hostmount.ReadOnly(m) == readOnly {
			return nil
		}
		return status.Errorf(codes.AlreadyExists, "target_path %q is already mounted, but not as this volume's %s bind mount", target, rw(readOnly))
	}
	if err := hostmount.Bind(ctx, s.x, rec.StagingPath, target, readOnly); err != nil {
		return errorStatus("bind mounting "+rec.StagingPath+" at "+target, err)
	}
	return nil
}

func (s *Server) publishBlock(ctx context.Context, rec *record, target string, readOnly bool) error {
	dev := rec.Attachment.Device
	// the read-only loop layer is needed only over a read-write device
	layer := readOnly && !rec.ReadOnly
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return status.Errorf(codes.Internal, "target_path: %v", err)
	}
	m, err := hostmount.MountAt(target)
	if err != nil {
		return status.Errorf(codes.Internal, "reading the mount table: %v", err)
	}
	if m != nil {
		if bound, ok := s.boundDevice(target); ok && (bound == dev && !layer || layer && isReadOnlyLayerOver(bound, dev)) {
			return nil
		}
		return status.Errorf(codes.AlreadyExists, "target_path %q is already mounted, but not as this volume's %s device", target, rw(readOnly))
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o640)
	if err != nil {
		return status.Errorf(codes.Internal, "target_path: %v", err)
	}
	f.Close()
	source := dev
	if layer {
		if source, err = s.readOnlyLayer(ctx, rec, target); err != nil {
			return err
		}
		faultpoint.Hit("rbd.NodePublishVolume.read-only-layer")
	}
	if err := hostmount.Bind(ctx, s.x, source, target, readOnly); err != nil {
		if layer {
			if derr := s.dropLayer(context.WithoutCancel(ctx), rec, target); derr != nil {
				klog.FromContext(ctx).Error(derr, "Undoing the read-only layer of a failed publish; NodeUnpublishVolume will retry")
			}
		}
		return errorStatus("bind mounting "+source+" at "+target, err)
	}
	return nil
}

// readOnlyLayer returns the read-only loop device to publish rec's device at target through:
// the one recorded for target when it still is such a layer (a publish that died before its
// bind mount), else a new one, recorded before it is bound to the device.
func (s *Server) readOnlyLayer(ctx context.Context, rec *record, target string) (string, error) {
	dev := rec.Attachment.Device
	if loop := rec.ReadOnlyLayers[target]; loop != "" && isReadOnlyLayerOver(loop, dev) {
		return loop, nil
	}
	loop, err := attach.LoopSetupReadOnly(ctx, s.x, dev, func(loop string) error {
		rec.setLayer(target, loop)
		if err := rec.write(); err != nil {
			return status.Errorf(codes.Internal, "writing the staging record: %v", err)
		}
		return nil
	})
	if err != nil {
		return "", errorStatus("making a read-only device over "+dev, err)
	}
	return loop, nil
}

// dropLayer detaches the read-only loop device recorded for target, if it is one over rec's
// device (after a reboot the name may belong to another device), and forgets it.
func (s *Server) dropLayer(ctx context.Context, rec *record, target string) error {
	loop := rec.ReadOnlyLayers[target]
	if loop == "" {
		return nil
	}
	if isReadOnlyLayerOver(loop, rec.Attachment.Device) {
		if err := attach.LoopDetach(ctx, s.x, loop); err != nil {
			return errorStatus("detaching the read-only layer "+loop, err)
		}
	}
	rec.setLayer(target, "")
	if err := rec.write(); err != nil {
		return status.Errorf(codes.Internal, "writing the staging record: %v", err)
	}
	return nil
}

// boundDevice is the device a bind-mounted device node at path refers to.
func (s *Server) boundDevice(path string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return "", false
	}
	dev := attach.DeviceOf(attach.SysRoot, st.Rdev)
	return dev, dev != ""
}

func isReadOnlyLayerOver(layer, dev string) bool {
	over, ok := attach.ReadOnlyLoopOver(attach.SysRoot, layer)
	return ok && over == dev
}

func rw(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}

// NodeUnpublishVolume implements csi.NodeServer: unmount the target and remove it (the spec
// makes the plugin remove what it created), and detach a read-only layer publish made. A
// target that is already gone is success.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volumeID, target, err := nodereq.Unpublish(req)
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeUnpublishVolume", volumeID, "targetPath", target)
	if err != nil {
		return nil, err
	}
	defer unlock()

	for range hostmount.MaxStacked {
		m, err := hostmount.MountAt(target)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "reading the mount table: %v", err)
		}
		if m == nil {
			break
		}
		// a read-only loop device over another block device is what publishBlock layers
		layer, _ := s.boundDevice(target)
		if _, ok := attach.ReadOnlyLoopOver(attach.SysRoot, layer); !ok {
			layer = ""
		}
		if _, err := s.x.Run(ctx, "umount", target); err != nil {
			return nil, errorStatus("unmounting "+target, err)
		}
		if layer != "" {
			if err := attach.LoopDetach(ctx, s.x, layer); err != nil {
				return nil, errorStatus("detaching the read-only layer "+layer, err)
			}
		}
	}
	// a layer recorded for the target whose publish died before its bind mount: nothing was
	// mounted, so the loop above did not see it
	if rec, err := s.findRecord(volumeID, ""); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	} else if rec != nil {
		if err := s.dropLayer(ctx, rec, target); err != nil {
			return nil, err
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, status.Error(codes.Internal, fmt.Sprintf("removing target_path: %v", err))
	}
	log.V(2).Info("Volume unpublished")
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
