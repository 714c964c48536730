package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// NodeStageVolume implements csi.NodeServer: attach the image with the volume's mounter,
// then for mount access format it if blank and mount it at the staging path; for block
// access only record the device.
//
// Staging converges: a repeated call with the same arguments finds the record, re-checks each
// step and redoes what is missing (after a reboot: everything), so it is idempotent and also
// completes a stage that a killed plugin left half done.
func (s *Server) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	r, err := parseStage(req)
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "NodeStageVolume", r.volumeID, "stagingPath", r.stagingPath, "mounter", r.image.Mounter)
	if err != nil {
		return nil, err
	}
	defer unlock()
	start := time.Now()

	cluster, err := s.stageCluster(ctx, &r, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	rec, err := s.stagedRecord(r.stagingPath)
	if err != nil {
		return nil, err
	}
	attacher, err := s.pickAttacher(&r, rec)
	if err != nil {
		return nil, err
	}
	if err := s.claim(ctx, r, cluster.MonHost()); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.stagingPath, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging_target_path: %v", err)
	}
	fresh := rec == nil
	if fresh {
		if rec, err = s.createRecord(r); err != nil {
			return nil, err
		}
	} else if err := sameStaging(r, rec); err != nil {
		return nil, err
	}

	err = s.stage(ctx, r, rec, attacher, cluster.MonHost(), s.crushLocation(ctx, cluster))
	if err != nil {
		if fresh {
			// the CO treats a final error as "nothing staged" and will not call unstage: take
			// back what this call set up
			if uerr := s.unstage(context.WithoutCancel(ctx), rec); uerr != nil {
				log.Error(uerr, "Undoing a failed stage; NodeUnstageVolume will retry", "stageErr", err)
			}
		}
		return nil, err
	}
	log.V(2).Info("Volume staged", "device", rec.Attachment.Device, "access", accessType(rec.Block), "duration", time.Since(start))
	return &csi.NodeStageVolumeResponse{}, nil
}

// stageCluster is the volume's cluster, and for an image librbd opens, the encryption it is
// opened with (set in r).
func (s *Server) stageCluster(ctx context.Context, r *stageRequest, secrets map[string]string) (v1.Cluster, error) {
	cluster, err := s.opts.Clusters.RBDCluster(r.image.ClusterID)
	if err != nil {
		// the map may be catching up with a ConfigMap change: retryable, not a bad request
		return v1.Cluster{}, status.Error(codes.FailedPrecondition, err.Error())
	}
	if r.image.Encrypted && !r.image.Librbd {
		return v1.Cluster{}, status.Errorf(codes.FailedPrecondition, "volume %q is encrypted by ceph-csi (volume_context[%q] = \"true\" without %q): monoceph does not open ceph-csi's encryption yet and will not stage it as a plain device",
			r.volumeID, volumecontext.Encrypted, volumecontext.EncryptionEngine)
	}
	if r.image.Librbd {
		if r.enc, err = s.encryption(ctx, *r, cluster.MonHost(), secrets); err != nil {
			return v1.Cluster{}, err
		}
	}
	return cluster, nil
}

// stagedRecord is the staging record at stagingPath, nil if there is none; a path that holds
// ceph-csi's staging instead is FAILED_PRECONDITION.
func (s *Server) stagedRecord(stagingPath string) (*record, error) {
	rec, err := s.loadRecord(stagingPath)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil {
		if st, err := readCephCSIStash(stagingPath); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		} else if st != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds ceph-csi's staging of image %s/%s: unstage it first (NodeUnstageVolume does)",
				stagingPath, st.Pool, st.Image)
		}
	}
	return rec, nil
}

// createRecord writes the record of a first stage of r, with its work directory.
func (s *Server) createRecord(r stageRequest) (*record, error) {
	// one staging per volume and node (CSI): a second path would share the first one's
	// attachment, and unstaging either would pull it from under the other
	other, err := s.findRecord(r.volumeID, "")
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if other != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is already staged at %q", r.volumeID, other.StagingPath)
	}
	rec := newRecord(r, s.workDir(r.volumeID))
	if err := os.MkdirAll(rec.Attachment.WorkDir, 0o700); err != nil {
		return nil, status.Errorf(codes.Internal, "work directory: %v", err)
	}
	// written before anything is attached: from here on, unstage can undo whatever follows
	if err := rec.write(); err != nil {
		return nil, status.Errorf(codes.Internal, "writing the staging record: %v", err)
	}
	return rec, nil
}

// sameStaging refuses a repeated stage whose record, rec, is of another volume or capability.
func sameStaging(r stageRequest, rec *record) error {
	if rec.VolumeID != r.volumeID {
		return status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds volume %q", r.stagingPath, rec.VolumeID)
	}
	if why := rec.conflict(r); why != "" {
		return status.Errorf(codes.AlreadyExists, "volume %q is staged at %q with another capability: %s", r.volumeID, r.stagingPath, why)
	}
	return nil
}

func (s *Server) stage(ctx context.Context, r stageRequest, rec *record, attacher attach.Attacher, monHost, crushLocation string) error {
	if err := s.writeIndex(rec); err != nil {
		return status.Errorf(codes.Internal, "writing the volume index: %v", err)
	}
	a, err := attacher.Attach(ctx, attach.Request{
		Image:    rec.Attachment.Image,
		MonHost:  monHost,
		Cred:     r.cred,
		ReadOnly: rec.ReadOnly,
		WorkDir:  rec.Attachment.WorkDir,
		// read affinity: only the fuse mounter reads through librbd in this driver's hands
		CrushLocation: crushLocation,
		Encryption:    r.enc,
	})
	if err != nil {
		return errorStatus("attaching image "+rec.Attachment.Image.Spec(), err)
	}
	faultpoint.Hit("rbd.NodeStageVolume.attached")
	rec.Attachment = a
	if s.keepsRecoveryKey(rec) {
		// refreshed by every stage: secrets may rotate
		rec.CephUser = r.cred.ID
		if err := nodestate.SaveRecoveryKey(rec.Attachment.WorkDir, r.cred.Key()); err != nil {
			return status.Errorf(codes.Internal, "saving the recovery key: %v", err)
		}
	}
	if err := rec.write(); err != nil {
		return status.Errorf(codes.Internal, "writing the staging record: %v", err)
	}
	if !rec.Block {
		if err := s.mountStaging(ctx, rec); err != nil {
			return err
		}
	}
	faultpoint.Hit("rbd.NodeStageVolume.mounted")
	rec.State = stateStaged
	if err := rec.write(); err != nil {
		return status.Errorf(codes.Internal, "writing the staging record: %v", err)
	}
	return nil
}

// mountStaging formats the device if it holds no filesystem and mounts it at the staging path.
func (s *Server) mountStaging(ctx context.Context, rec *record) error {
	dev := rec.Attachment.Device
	m, err := hostmount.MountAt(rec.StagingPath)
	if err != nil {
		return status.Errorf(codes.Internal, "reading the mount table: %v", err)
	}
	if m != nil {
		var st unix.Stat_t
		if err := unix.Stat(dev, &st); err != nil {
			return status.Errorf(codes.Internal, "stat %s: %v", dev, err)
		}
		if uint32(m.Major) == unix.Major(st.Rdev) && uint32(m.Minor) == unix.Minor(st.Rdev) {
			return nil
		}
		// e.g. the rbd-fuse daemon died and Attach made a new device: the filesystem mounted
		// on the old one cannot be moved under the pods using it
		return status.Errorf(codes.FailedPrecondition, "staging_target_path %q is mounted from device %d:%d, but the volume is now attached at %s: unstage the volume first",
			rec.StagingPath, m.Major, m.Minor, dev)
	}
	opts := append([]string(nil), rec.MountFlags...)
	if rec.ReadOnly {
		opts = append(opts, "ro")
	}
	var formatOpts []string
	switch rec.FsType {
	case "xfs":
		// clones and restored snapshots share their source's filesystem UUID; xfs refuses to
		// mount a second filesystem with a UUID already mounted
		opts = append(opts, "nouuid")
		// -K: do not discard; a new image is already thin, and discarding it block by block
		// through a loop device is slow
		formatOpts = []string{"-K"}
	case "ext4":
		formatOpts = []string{"-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"}
	}
	return s.formatAndMount(ctx, dev, rec.StagingPath, rec.FsType, rec.ReadOnly, opts, formatOpts)
}

// NodeUnstageVolume implements csi.NodeServer: unmount the staging path, detach the image and
// remove the record. What to undo comes from the record, and whatever is already gone is
// skipped, so it is idempotent and also cleans up after a failed or interrupted stage.
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
		return nil, status.Error(codes.Internal, err.Error())
	}
	if rec == nil {
		// the record is written before anything is set up: without one there is nothing of
		// ours here (never staged, or already unstaged), but maybe ceph-csi's
		st, err := readCephCSIStash(stagingPath)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if st != nil {
			if err := s.unstageCephCSI(ctx, stagingPath, volumeID, st); err != nil {
				return nil, err
			}
			log.V(2).Info("Volume unstaged (staged by ceph-csi)", "image", st.Pool+"/"+st.Image, "duration", time.Since(start))
		}
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if rec.VolumeID != volumeID {
		return nil, status.Errorf(codes.FailedPrecondition, "staging_target_path %q holds volume %q, not %q", stagingPath, rec.VolumeID, volumeID)
	}
	if err := s.unstage(ctx, rec); err != nil {
		return nil, err
	}
	log.V(2).Info("Volume unstaged", "duration", time.Since(start))
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// unstage undoes everything a record describes, then removes it.
func (s *Server) unstage(ctx context.Context, rec *record) error {
	if err := hostmount.Unmount(ctx, s.x, rec.StagingPath); err != nil {
		return errorStatus("unmounting "+rec.StagingPath, err)
	}
	faultpoint.Hit("rbd.NodeUnstageVolume.unmounted")
	// read-only layers of publishes the CO did not unpublish (a layer still bound at a target
	// is only marked to go when released)
	for target := range rec.ReadOnlyLayers {
		if err := s.dropLayer(ctx, rec, target); err != nil {
			return err
		}
	}
	attacher, ok := s.attachers[rec.Mounter]
	if !ok {
		return status.Errorf(codes.Internal, "staging record %s names unknown mounter %q", nodestate.RecordPath(rec.StagingPath), rec.Mounter)
	}
	// no Available check: a mounter that went away (module unloaded) must still be cleaned up
	if err := attacher.Detach(ctx, rec.Attachment); err != nil {
		return errorStatus("detaching image "+rec.Attachment.Image.Spec(), err)
	}
	faultpoint.Hit("rbd.NodeUnstageVolume.detached")
	if dir := rec.Attachment.WorkDir; dir != "" {
		// os.Remove, never RemoveAll: were anything still mounted in there, recursive removal
		// would reach into it (and unlinking the file rbd-fuse shows removes the image)
		if err := nodestate.RemoveIndex(dir); err != nil {
			return status.Errorf(codes.Internal, "removing the volume index: %v", err)
		}
		if err := nodestate.RemoveRecoveryKey(dir); err != nil {
			return status.Errorf(codes.Internal, "removing the recovery key: %v", err)
		}
		if err := ignoreNotExist(os.Remove(dir)); errors.Is(err, unix.ENOTEMPTY) {
			klog.FromContext(ctx).Info("Work directory not empty, left in place", "dir", dir)
		} else if err != nil {
			return status.Errorf(codes.Internal, "removing the work directory: %v", err)
		}
	}
	if err := rec.remove(); err != nil {
		return status.Errorf(codes.Internal, "removing the staging record: %v", err)
	}
	return nil
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
