package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodePublishVolume implements csi.NodeServer: bind mount the staging path (a shallow volume's
// snapshot directory in it) at the target directory. Read-only comes from the readonly flag, a
// reader-only access mode, a read-only staging and, always, a shallow volume; a read-only bind
// rejects writes with EROFS.
//
// A broken staging mount is remounted first (with this call's secrets, else the recovery key)
// and the volume's other targets are bound again; success is reported only once the target
// answers.
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
		return nil, internal("reading the staging record", err)
	}
	if rec == nil || rec.VolumeID != r.volumeID || rec.State != stateStaged {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %q", r.volumeID, r.stagingPath)
	}
	if err := s.ensureHealthy(ctx, rec, r.secrets); err != nil {
		return nil, err
	}
	readOnly := r.readOnly || rec.ReadOnly || rec.Shallow != nil
	if err := ensureDir(r.targetPath); err != nil {
		return nil, internal("target_path", err)
	}
	done, err := s.checkTarget(ctx, rec, r.targetPath, readOnly)
	if err != nil {
		return nil, err
	}
	if rec.addTarget(r.targetPath, readOnly) {
		// recorded before the bind: a plugin killed after it leaves a target Recover and
		// unpublish know about
		if err := rec.write(); err != nil {
			return nil, internal("writing the staging record", err)
		}
	}
	if done {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := s.bindTarget(ctx, rec, target{Path: r.targetPath, ReadOnly: readOnly}); err != nil {
		if uerr := hostmount.LazyUnmount(context.WithoutCancel(ctx), s.x, r.targetPath); uerr != nil {
			log.Error(uerr, "Unmounting a failed publish")
		}
		if rec.removeTarget(r.targetPath) {
			if werr := rec.write(); werr != nil {
				log.Error(werr, "Writing the staging record")
			}
		}
		return nil, errorStatus("bind mounting "+rec.source()+" at "+r.targetPath, err)
	}
	log.V(2).Info("Volume published", "readOnly", readOnly)
	return &csi.NodePublishVolumeResponse{}, nil
}

// checkTarget looks at what is mounted at the target: nothing (bind it), this volume's bind
// mount as asked (done), a broken CephFS mount (detached, bind it), or anything else
// (ALREADY_EXISTS).
func (s *Server) checkTarget(ctx context.Context, rec *record, targetPath string, readOnly bool) (done bool, err error) {
	state, m, err := mount.Inspect(ctx, targetPath, s.opts.Timeout)
	if err != nil {
		return false, errorStatus("checking target_path", err)
	}
	switch state {
	case mount.NotMounted:
		return false, nil
	case mount.Broken:
		if !mount.IsCephFS(m) {
			break
		}
		// bound again on top of it (see repair): a pod using the target with HostToContainer
		// propagation sees the new mount
		klog.FromContext(ctx).Info("Binding the volume again over a broken bind mount at the target")
		return false, nil
	case mount.Healthy:
		staging, err := hostmount.MountAt(rec.StagingPath)
		if err != nil {
			return false, internal("reading the mount table", err)
		}
		wantRoot := staging.Root
		if rec.Shallow != nil {
			wantRoot = path.Join(staging.Root, rec.Shallow.SnapshotDir)
		}
		if hostmount.SameFilesystem(m, staging) && m.Root == wantRoot {
			if hostmount.ReadOnly(m) == readOnly {
				return true, nil
			}
			return false, status.Errorf(codes.AlreadyExists, "target_path %q is already published %s", targetPath, rw(hostmount.ReadOnly(m)))
		}
	}
	return false, status.Errorf(codes.AlreadyExists, "target_path %q is already mounted, but not as this volume's bind mount (%s %s)", targetPath, m.FsType, m.Root)
}

// NodeUnpublishVolume implements csi.NodeServer: unmount the target (a broken one lazily) and
// remove it: the spec makes the plugin remove what it created. A target that is gone is
// success.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	volumeID, targetPath, err := nodereq.Unpublish(req)
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeUnpublishVolume", volumeID, "targetPath", targetPath)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// UnmountOrDetach falls back to a lazy unmount, which also clears a bind of a dead FUSE mount
	if err := hostmount.UnmountOrDetach(ctx, s.x, targetPath); err != nil {
		return nil, errorStatus("unmounting target_path", err)
	}
	if err := os.Remove(targetPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, internal("removing target_path", err)
	}
	rec, err := s.findRecord(volumeID, "")
	if err != nil {
		return nil, internal("reading the staging record", err)
	}
	if rec != nil && rec.removeTarget(targetPath) {
		if err := rec.write(); err != nil {
			return nil, internal("writing the staging record", err)
		}
	}
	log.V(2).Info("Volume unpublished")
	return &csi.NodeUnpublishVolumeResponse{}, nil
}
