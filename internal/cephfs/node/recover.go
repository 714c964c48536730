package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// repair mounts a staged volume whose staging mount is broken (its FUSE daemon died) or gone,
// and binds its publish targets again.
//
// A target's bind mount of a dead FUSE mount shares its dead connection. It is not unmounted:
// the new bind is mounted on top of it. A pod's container has the target bound in as a copy
// of that mount; with HostToContainer propagation, mounts made on top of it reach the
// container, so the pod sees the volume again at the same path (files it had open stay dead
// and must be opened again). Without propagation the container keeps the dead copy until it
// restarts, whatever the node does.
func (s *Server) repair(ctx context.Context, rec *record, cred ceph.Credentials, state mount.State) error {
	log := klog.FromContext(ctx)
	start := time.Now()
	log.Info("Remounting a staged volume", "state", state.String(), "mounter", rec.Mounter, "targets", len(rec.Targets))
	if err := s.unmountStaging(ctx, rec); err != nil {
		return err
	}
	// the record stays "staged" while the mount is redone: a repair that fails or is cut short
	// leaves a staged volume with nothing mounted, which the next Recover pass, stage or
	// publish repairs again, publish targets included
	if err := s.mountStaging(ctx, rec, cred); err != nil {
		return err
	}
	if err := s.rebindBroken(ctx, rec); err != nil {
		return errorStatus("binding publish targets again", err)
	}
	log.Info("Remounted a staged volume", "duration", time.Since(start))
	return nil
}

// bindTarget binds rec's source at t (on top of what is mounted there), unless t is gone (its
// pod went while the mount was down; NodeUnpublishVolume will forget it).
func (s *Server) bindTarget(ctx context.Context, rec *record, t target) error {
	// a dead mount at the target cannot even be stat'ed, but is there
	if m, err := hostmount.MountAt(t.Path); err != nil {
		return err
	} else if m == nil {
		if _, err := os.Lstat(t.Path); err != nil {
			klog.FromContext(ctx).Info("Not binding a publish target that is gone", "targetPath", t.Path)
			return nil
		}
	}
	if err := hostmount.Bind(ctx, s.x, rec.source(), t.Path, t.ReadOnly); err != nil {
		return err
	}
	state, _, err := mount.Inspect(ctx, t.Path, s.opts.Timeout)
	if err == nil && state != mount.Healthy {
		err = fmt.Errorf("the bind mount at %s is %s", t.Path, state)
	}
	return err
}

// ensureHealthy checks a staged volume's mount and repairs it when broken or gone, with the
// request's secrets or the recovery key.
func (s *Server) ensureHealthy(ctx context.Context, rec *record, secrets map[string]string) error {
	state, _, err := mount.Inspect(ctx, rec.StagingPath, s.opts.Timeout)
	if err != nil {
		return errorStatus("checking the staging mount", err)
	}
	if state == mount.Healthy {
		return nil
	}
	cred, err := remountCredentials(rec, secrets)
	if err != nil {
		return err
	}
	return s.repair(ctx, rec, cred, state)
}

// orphanAge is how old a work directory without a record must be before Recover removes it; a
// stage in progress creates the directory an instant before linking it to its record.
const orphanAge = 10 * time.Minute

// Recover remounts broken FUSE mounts of volumes staged on this node and binds their publish
// targets again, with the recovery keys kept for them. The driver calls it at start-up, in the
// background: a restart of the plugin is what usually kills the daemons it started, and
// kubelet does not stage a volume again while it believes it staged. Volumes another operation
// holds are left to that operation. It also removes work directories (and their keys) whose
// volume is no longer staged.
//
// A volume whose repair failed for a reason time may cure (Ceph unreachable or slow, a stuck
// mount) is tried again with backoff (Options.RecoverBackoff) until it is repaired or ctx ends;
// one that cannot be repaired this way (no recovery key, subvolume gone, access denied) is not.
// Recover returns what it could not repair; each of those volumes is also repaired by its next
// NodeStageVolume or NodePublishVolume.
func (s *Server) Recover(ctx context.Context) error {
	dirs, err := nodestate.WorkDirs(s.opts.StateDir)
	if err != nil {
		return fmt.Errorf("cephfs node recovery: %w", err)
	}
	repaired, err := nodereq.RecoverAll(ctx, "CephFS node recovery", dirs, s.opts.RecoverBackoff, s.recoverDir)
	klog.FromContext(ctx).Info("CephFS node recovery done", "volumes", len(dirs), "remounted", repaired, "failed", err != nil)
	return err
}

// recoverDir recovers the volume of one work directory, or removes the directory when no
// staged volume refers to it; it reports whether it remounted.
func (s *Server) recoverDir(ctx context.Context, dir string) (bool, error) {
	rec, err := s.indexedRecord(dir)
	if err != nil {
		return false, err
	}
	if rec == nil {
		s.removeOrphan(ctx, dir)
		return false, nil
	}
	if rec.State != stateStaged || rec.Mounter != mount.NameFuse {
		return false, nil // an interrupted stage is redone by the CO's retry; kernel mounts heal themselves
	}
	done, err := s.recoverVolume(ctx, rec)
	if err != nil {
		return done, fmt.Errorf("volume %q at %s: %w", rec.VolumeID, rec.StagingPath, err)
	}
	return done, nil
}

func (s *Server) recoverVolume(ctx context.Context, rec *record) (bool, error) {
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "Recover", rec.VolumeID, "stagingPath", rec.StagingPath)
	if err != nil {
		return false, nil // an RPC is on it
	}
	defer unlock()
	statCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	_, err = hostmount.StatWithin(statCtx, rec.StagingPath)
	cancel()
	if hostmount.Unresponsive(err) {
		// a stuck mount, not a dead one: remounting would leave its daemon behind
		return false, status.Errorf(codes.Unavailable, "the staging mount does not answer: %v", err)
	}
	if err != nil && !mount.IsBroken(err) {
		// the CO removed the staging directory: nothing to mount on
		log.Info("Not recovering a volume whose staging path is gone", "err", err)
		return false, nil
	}
	state, _, err := mount.Inspect(ctx, rec.StagingPath, s.opts.Timeout)
	if err != nil {
		return false, err
	}
	if state == mount.Healthy {
		return false, s.rebindBroken(ctx, rec)
	}
	cred, err := loadRecoveryKey(rec)
	if err != nil {
		return false, status.Errorf(codes.FailedPrecondition, "no recovery key: %v; the next NodeStageVolume or NodePublishVolume with secrets remounts it", err)
	}
	if err := s.repair(ctx, rec, cred, state); err != nil {
		return false, err
	}
	return true, nil
}

// rebindBroken binds the publish targets of a healthy staging mount again where they are
// broken (bound to a dead mount: see repair) or missing.
func (s *Server) rebindBroken(ctx context.Context, rec *record) error {
	var errs []error
	for _, t := range rec.Targets {
		state, _, err := mount.Inspect(ctx, t.Path, s.opts.Timeout)
		if err != nil || state == mount.Healthy {
			continue
		}
		if err := s.bindTarget(ctx, rec, t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeOrphan removes a work directory no staged volume refers to: its recovery key must not
// outlive the volume. A directory whose daemon still runs is left alone.
func (s *Server) removeOrphan(ctx context.Context, dir string) {
	log := klog.FromContext(ctx).WithValues("workDir", dir)
	fi, err := os.Stat(dir)
	if err != nil || time.Since(fi.ModTime()) < orphanAge {
		return
	}
	if running, err := s.mounters[mount.NameFuse].Running(ctx, dir); err != nil || running {
		log.Info("Keeping a work directory without a staging record: its ceph-fuse daemon still runs", "err", err)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Error(err, "Removing a work directory without a staging record")
		return
	}
	log.Info("Removed a work directory without a staging record")
}
