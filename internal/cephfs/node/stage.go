package node

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/cephname"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodeStageVolume implements csi.NodeServer: mount the volume (for a shallow volume, the
// directory holding its snapshot) at the staging path.
//
// Staging converges: a repeated call finds the record and checks the mount. A healthy mount
// is success; a broken one (its FUSE daemon died) or a missing one (the node rebooted) is
// mounted again with this call's secrets, and the targets it was published at are bound
// again; a stage a killed plugin left half done is redone.
func (s *Server) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	r, err := parseStage(req)
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeStageVolume", r.volumeID, "stagingPath", r.stagingPath)
	if err != nil {
		return nil, err
	}
	defer unlock()
	start := time.Now()

	if err := s.clusterDefaults(&r); err != nil {
		return nil, err
	}
	if err := ensureDir(r.stagingPath); err != nil {
		return nil, internal("staging_target_path", err)
	}
	rec, err := s.loadRecord(r.stagingPath)
	if err != nil {
		return nil, internal("reading the staging record", err)
	}
	if r.vol.CephCSIShallow {
		if err := s.resolveCephCSIShallow(ctx, &r, rec); err != nil {
			return nil, err
		}
	}
	if rec != nil {
		if rec.VolumeID != r.volumeID {
			return nil, status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds volume %q", r.stagingPath, rec.VolumeID)
		}
		if err := s.restage(ctx, rec, r); err != nil {
			return nil, err
		}
		log.V(2).Info("Volume staged again", "mounter", rec.Mounter, "duration", time.Since(start))
		return &csi.NodeStageVolumeResponse{}, nil
	}

	if rec, err = s.newRecord(ctx, r); err != nil {
		return nil, err
	}
	if err := s.stageNew(ctx, rec, r); err != nil {
		return nil, err
	}
	log.V(2).Info("Volume staged", "mounter", rec.Mounter, "mountedPath", rec.MountedPath, "shallow", rec.Shallow != nil, "duration", time.Since(start))
	return &csi.NodeStageVolumeResponse{}, nil
}

// clusterDefaults looks the volume's cluster up, refuses an encrypted volume, and fills in
// ceph-csi's mount options per cluster (config.json) where the volume names none.
func (s *Server) clusterDefaults(r *stageRequest) error {
	cluster, err := s.opts.Clusters.Cluster(r.vol.ClusterID)
	if err != nil {
		// the map may be catching up with a ConfigMap change: retryable, not a bad request
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	if r.vol.Encrypted {
		return status.Errorf(codes.FailedPrecondition, "volume %q is encrypted (volume_context[%q] = \"true\", ceph-csi's fscrypt): monoceph does not support encryption and will not mount it as plain files",
			r.volumeID, volumecontext.Encrypted)
	}
	if r.vol.FuseMountOptions == "" {
		r.vol.FuseMountOptions = cluster.CephFS.FuseMountOptions
	}
	if r.vol.KernelMountOptions == "" {
		r.vol.KernelMountOptions = cluster.CephFS.KernelMountOptions
	}
	return nil
}

// newRecord decides how a volume not staged at this path yet is to be mounted: the mounter,
// its options and the layout, as the staging record that stageNew writes first.
func (s *Server) newRecord(ctx context.Context, r stageRequest) (*record, error) {
	// one staging per volume and node (CSI): a second path would share the first one's work
	// directory, and unstaging either would stop the other's daemon
	if other, err := s.findRecord(r.volumeID, ""); err != nil {
		return nil, internal("reading the staging record", err)
	} else if other != nil && other.StagingPath != r.stagingPath {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is already staged at %q", r.volumeID, other.StagingPath)
	}
	if err := s.clearDeadMount(ctx, r.stagingPath); err != nil {
		return nil, err
	}
	mounter, err := s.mounter(ctx, r.vol.Mounter)
	if err != nil {
		return nil, err
	}
	options, err := mounter.ParseOptions(mounterOptions(mounter.Name(), r), r.access.mountFlags)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s mount options: %v", mounter.Name(), err)
	}
	l := volumeLayout(r.vol)
	rec := &record{
		VolumeID:         r.volumeID,
		State:            stateMounting,
		StagingPath:      r.stagingPath,
		ClusterID:        r.vol.ClusterID,
		FSName:           r.vol.FSName,
		RootPath:         r.vol.RootPath,
		MountedPath:      l.mountedPath,
		Mounter:          mounter.Name(),
		RequestedMounter: r.vol.Mounter,
		Options:          options,
		ReadOnly:         r.access.readOnly || r.vol.Shallow,
		CephUser:         r.cred.ID,
		WorkDir:          s.workDir(r.volumeID),
	}
	if r.vol.Shallow {
		rec.Shallow = &shallow{SnapshotName: r.vol.SnapshotName, SnapshotDir: l.snapshotDir}
	}
	return rec, nil
}

// stageNew writes the record, then mounts: from the record on, unstage can undo whatever
// follows.
func (s *Server) stageNew(ctx context.Context, rec *record, r stageRequest) error {
	if err := rec.write(); err != nil {
		return internal("writing the staging record", err)
	}
	if err := os.MkdirAll(rec.WorkDir, 0o700); err != nil {
		return internal("work directory", err)
	}
	if err := s.writeIndex(rec); err != nil {
		return internal("writing the volume index", err)
	}
	if err := s.mountStaging(ctx, rec, r.cred); err != nil {
		// nothing is mounted (mountStaging undoes its own partial work): forget the volume,
		// so a retry with other arguments starts clean
		if cerr := s.forget(rec); cerr != nil {
			klog.FromContext(ctx).Error(cerr, "Cleaning up after a failed stage")
		}
		return err
	}
	return nil
}

// ensureDir creates a directory for a mount point. A mount point is left alone without a
// look: stat fails on a broken one (and MkdirAll then with EEXIST) and hangs on a stuck one.
func ensureDir(p string) error {
	m, err := hostmount.MountAt(p)
	if err != nil || m != nil {
		return err
	}
	return os.MkdirAll(p, 0o750)
}

// mounterOptions are the volume's options for mounter.
func mounterOptions(mounter string, r stageRequest) string {
	if mounter == mount.NameKernel {
		return r.vol.KernelMountOptions
	}
	return r.vol.FuseMountOptions
}

// restage handles a stage request at a path that has a record of this volume.
func (s *Server) restage(ctx context.Context, rec *record, r stageRequest) error {
	mounter, ok := s.mounters[rec.Mounter]
	if !ok {
		return status.Errorf(codes.Internal, "staging record of %q names an unknown mounter %q", rec.VolumeID, rec.Mounter)
	}
	options, err := mounter.ParseOptions(mounterOptions(rec.Mounter, r), r.access.mountFlags)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s mount options: %v", rec.Mounter, err)
	}
	if why := rec.conflict(r, options); why != "" {
		return status.Errorf(codes.AlreadyExists, "volume %q is staged at %q with other arguments: %s", r.volumeID, r.stagingPath, why)
	}
	if rec.State != stateStaged {
		// a stage that a killed plugin left half done: start it over
		klog.FromContext(ctx).Info("Completing an interrupted stage")
		if err := s.unmountStaging(ctx, rec); err != nil {
			return err
		}
		return s.mountStaging(ctx, rec, r.cred)
	}
	state, _, err := mount.Inspect(ctx, rec.StagingPath, s.opts.Timeout)
	if err != nil {
		return errorStatus("checking the staging mount", err)
	}
	if state != mount.Healthy {
		return s.repair(ctx, rec, r.cred, state)
	}
	if rec.Mounter == mount.NameFuse {
		// secrets may have rotated since: a later remount uses the current key
		rec.CephUser = r.cred.ID
		if err := saveRecoveryKey(rec, r.cred); err != nil {
			return internal("staging", err)
		}
		if err := rec.write(); err != nil {
			return internal("writing the staging record", err)
		}
	}
	return nil
}

// mountStaging mounts rec at its staging path, finds a shallow volume's snapshot and marks
// the record staged. On failure nothing stays mounted.
func (s *Server) mountStaging(ctx context.Context, rec *record, cred ceph.Credentials) error {
	mounter, ok := s.mounters[rec.Mounter]
	if !ok {
		return status.Errorf(codes.Internal, "unknown mounter %q", rec.Mounter)
	}
	if err := mounter.Available(ctx); err != nil {
		return errorStatus("node "+s.opts.NodeID, err)
	}
	cluster, err := s.opts.Clusters.Cluster(rec.ClusterID)
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	if err := os.MkdirAll(rec.WorkDir, 0o700); err != nil {
		return internal("work directory", err)
	}
	err = mounter.Mount(ctx, mount.Request{
		Monitors: cluster.Monitors,
		FSName:   rec.FSName,
		Path:     rec.MountedPath,
		Target:   rec.StagingPath,
		ReadOnly: rec.ReadOnly,
		Options:  rec.Options,
		Cred:     cred,
		WorkDir:  rec.WorkDir,
		Node:     s.opts.NodeID,
	})
	if err != nil {
		return errorStatus(fmt.Sprintf("mounting %s:%s at %s with %s", rec.FSName, rec.MountedPath, rec.StagingPath, rec.Mounter), err)
	}
	faultpoint.Hit("cephfs.NodeStageVolume.mounted")
	if err := s.finishStaging(ctx, rec, cred); err != nil {
		if uerr := s.unmountStaging(context.WithoutCancel(ctx), rec); uerr != nil {
			klog.FromContext(ctx).Error(uerr, "Unmounting after a failed stage")
		}
		return err
	}
	return nil
}

func (s *Server) finishStaging(ctx context.Context, rec *record, cred ceph.Credentials) error {
	// the helper returned success; make sure the mount answers before anyone relies on it
	state, _, err := mount.Inspect(ctx, rec.StagingPath, s.opts.Timeout)
	if err != nil {
		return errorStatus("checking the new mount", err)
	}
	if state != mount.Healthy {
		return status.Errorf(codes.Internal, "the new %s mount at %s is %s", rec.Mounter, rec.StagingPath, state)
	}
	if rec.Shallow != nil {
		dir, err := resolveSnapshotDir(rec.StagingPath, layoutOf(rec), rec.Shallow.SnapshotName)
		if err != nil {
			return err
		}
		rec.Shallow.SnapshotDir = dir
	}
	rec.CephUser = cred.ID
	if rec.Mounter == mount.NameFuse {
		if err := saveRecoveryKey(rec, cred); err != nil {
			return internal("staging", err)
		}
	}
	rec.State = stateStaged
	if err := rec.write(); err != nil {
		return internal("writing the staging record", err)
	}
	return nil
}

// layoutOf is the layout a record was staged with.
func layoutOf(rec *record) layout {
	v := volumecontext.Volume{RootPath: rec.RootPath}
	if rec.Shallow != nil {
		v.Shallow, v.SnapshotName = true, rec.Shallow.SnapshotName
	}
	return volumeLayout(v)
}

// unmountStaging unmounts the staging path and makes sure the mounter left nothing running.
func (s *Server) unmountStaging(ctx context.Context, rec *record) error {
	state, _, err := mount.Inspect(ctx, rec.StagingPath, s.opts.Timeout)
	if err != nil {
		// a mount that does not answer cannot be unmounted cleanly: detach it
		state = mount.Broken
	}
	switch state {
	case mount.Broken:
		err = hostmount.LazyUnmount(ctx, s.x, rec.StagingPath)
	case mount.Healthy:
		err = hostmount.UnmountOrDetach(ctx, s.x, rec.StagingPath)
	}
	if err != nil {
		return errorStatus("unmounting "+rec.StagingPath, err)
	}
	if m, ok := s.mounters[rec.Mounter]; ok {
		if err := m.Release(ctx, rec.WorkDir); err != nil {
			return errorStatus("releasing the "+rec.Mounter+" mount", err)
		}
	}
	return nil
}

// forget removes what the driver keeps about a volume: its work directory (recovery key,
// daemon files), its index and, last, its record, so an interrupted forget is redone by the
// next unstage. The directory removed recursively is the one derived from the volume ID, never
// one a record file names.
func (s *Server) forget(rec *record) error {
	dir := s.workDir(rec.VolumeID)
	if err := hostexec.RemoveKeyFiles(dir); err != nil {
		return err
	}
	if err := removeRecoveryKey(rec); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return rec.remove()
}

// NodeUnstageVolume implements csi.NodeServer: unmount the staging path, make sure a FUSE
// daemon is gone, and remove the record and the volume's files. A volume that is not staged
// (any more) is success.
func (s *Server) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	volumeID, stagingPath, err := nodereq.Unstage(req)
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeUnstageVolume", volumeID, "stagingPath", stagingPath)
	if err != nil {
		return nil, err
	}
	defer unlock()
	start := time.Now()

	rec, err := s.loadRecord(stagingPath)
	if err != nil {
		return nil, internal("reading the staging record", err)
	}
	if rec == nil {
		// nothing of this driver's; a CephFS mount there is a leftover all the same
		if m, err := hostmount.MountAt(stagingPath); err == nil && mount.IsCephFS(m) {
			if err := hostmount.LazyUnmount(ctx, s.x, stagingPath); err != nil {
				return nil, errorStatus("unmounting "+stagingPath, err)
			}
		}
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if rec.VolumeID != volumeID {
		return nil, status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds volume %q, not %q", stagingPath, rec.VolumeID, volumeID)
	}
	// CSI has the CO unpublish first; unmounting the staging mount under a live bind mount
	// would leave the daemon running for the bind (and stopping it would break the pod)
	for _, t := range rec.Targets {
		if m, err := hostmount.MountAt(t.Path); err == nil && mount.IsCephFS(m) {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q is still published at %s: NodeUnpublishVolume first", volumeID, t.Path)
		}
	}
	if err := s.unmountStaging(ctx, rec); err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.NodeUnstageVolume.unmounted")
	if err := s.forget(rec); err != nil {
		return nil, internal("removing the volume's state", err)
	}
	log.V(2).Info("Volume unstaged", "duration", time.Since(start))
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// clearDeadMount checks that nothing is mounted at a staging path this driver has no record
// of. A CephFS mount whose FUSE daemon is gone is cleared: it is what ceph-csi's node plugin
// leaves when its pod (which ran the ceph-fuse daemons) stopped for the swap to monoceph, and
// nothing can read or write through it any more. Anything else mounted there is ALREADY_EXISTS.
func (s *Server) clearDeadMount(ctx context.Context, stagingPath string) error {
	m, err := hostmount.MountAt(stagingPath)
	if err != nil {
		return internal("reading the mount table", err)
	}
	if m == nil {
		return nil
	}
	if mount.IsCephFS(m) {
		state, _, err := mount.Inspect(ctx, stagingPath, s.opts.Timeout)
		if err == nil && state == mount.Broken {
			klog.FromContext(ctx).Info("Clearing a dead CephFS mount left at the staging path by another driver", "fsType", m.FsType)
			if err := hostmount.LazyUnmount(ctx, s.x, stagingPath); err != nil {
				return errorStatus("unmounting the dead mount at "+stagingPath, err)
			}
			return nil
		}
	}
	return status.Errorf(codes.AlreadyExists, "staging_target_path %q is already mounted (%s) without a record of this driver", stagingPath, m.FsType)
}

// resolveCephCSIShallow completes the request of one of ceph-csi's shallow volumes with the
// snapshot it exposes: from the record when staged already, else from ceph-csi's journal.
func (s *Server) resolveCephCSIShallow(ctx context.Context, r *stageRequest, rec *record) error {
	switch {
	case rec != nil && rec.Shallow != nil:
		r.vol.SnapshotName = rec.Shallow.SnapshotName
	case s.opts.ResolveCephCSIShallow == nil:
		return status.Errorf(codes.FailedPrecondition, "volume %q is one of ceph-csi's shallow volumes, and this node cannot read ceph-csi's journal to find its snapshot", r.volumeID)
	default:
		snap, err := s.opts.ResolveCephCSIShallow(ctx, r.vol.ClusterID, r.volumeID, r.cred)
		if err != nil {
			return err
		}
		// the name comes from an omap value anyone with the journal's write access can set,
		// and is joined into the path bound into pods
		if err := cephname.Check(snap); err != nil {
			return status.Errorf(codes.FailedPrecondition, "volume %q: ceph-csi's journal names its snapshot %q, which %v", r.volumeID, snap, err)
		}
		r.vol.SnapshotName = snap
	}
	r.vol.Shallow = true
	return nil
}
