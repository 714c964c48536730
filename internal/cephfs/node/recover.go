package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// repair mounts a staged volume whose staging mount is broken (its FUSE daemon died) or gone,
// and binds its publish targets again. Bind mounts of a dead FUSE mount share its dead
// connection, so they are detached first and bound to the new mount afterwards; pods see the
// new mount when their volume mounts propagate from the host (HostToContainer), as kubelet
// sets up for CSI volumes.
func (s *Server) repair(ctx context.Context, rec *record, cred ceph.Credentials, state mount.State) error {
	log := klog.FromContext(ctx)
	start := time.Now()
	log.Info("Remounting a staged volume", "state", state.String(), "mounter", rec.Mounter, "targets", len(rec.Targets))
	for _, t := range rec.Targets {
		if err := hostmount.LazyUnmount(ctx, s.x, t.Path); err != nil {
			return errorStatus("detaching the publish target "+t.Path, err)
		}
	}
	if err := s.unmountStaging(ctx, rec); err != nil {
		return err
	}
	// the record stays "staged" while the mount is redone: a repair that fails or is cut short
	// leaves a staged volume with nothing mounted, which the next Recover pass, stage or
	// publish repairs again, publish targets included
	if err := s.mountStaging(ctx, rec, cred); err != nil {
		return err
	}
	var errs []error
	for _, t := range rec.Targets {
		if err := s.bindTarget(ctx, rec, t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return errorStatus("binding publish targets again", err)
	}
	log.Info("Remounted a staged volume", "duration", time.Since(start))
	return nil
}

// bindTarget binds rec's source at t again, unless t is gone (its pod went while the mount
// was down; NodeUnpublishVolume will forget it).
func (s *Server) bindTarget(ctx context.Context, rec *record, t target) error {
	if _, err := os.Lstat(t.Path); err != nil {
		klog.FromContext(ctx).Info("Not binding a publish target that is gone", "targetPath", t.Path)
		return nil
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

// DefaultRecoverBackoff paces Recover's retries of the volumes it could not repair yet: a
// plugin often restarts together with the cluster or the network it reaches the cluster by.
var DefaultRecoverBackoff = wait.Backoff{Duration: 2 * time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: time.Minute}

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
	log := klog.FromContext(ctx)
	entries, err := os.ReadDir(s.opts.StateDir)
	if err != nil {
		return fmt.Errorf("cephfs node recovery: %w", err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(s.opts.StateDir, e.Name()))
		}
	}
	backoff := s.opts.RecoverBackoff
	repaired, failed := 0, map[string]error{} // work directory → why its volume is not repaired
retries:
	for attempt := 1; ; attempt++ {
		var retry []string
		for _, dir := range dirs {
			done, err := s.recoverDir(ctx, dir)
			if done {
				repaired++
			}
			delete(failed, dir)
			if err != nil {
				failed[dir] = err
				if retryable(err) {
					retry = append(retry, dir)
				}
			}
		}
		if len(retry) == 0 {
			break
		}
		delay := backoff.Step()
		log.Info("CephFS node recovery: volumes not repaired yet, retrying", "attempt", attempt, "volumes", len(retry), "retryIn", delay, "err", joinSorted(failed))
		select {
		case <-ctx.Done():
			log.Info("CephFS node recovery gives up", "reason", ctx.Err())
			break retries
		case <-time.After(delay):
		}
		dirs = retry
	}
	log.Info("CephFS node recovery done", "volumes", len(entries), "remounted", repaired, "failed", len(failed))
	return joinSorted(failed)
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

// retryable reports whether a failed repair may succeed later without anyone acting: not when
// the request itself is wrong, the key is missing or refused, or the subvolume is gone.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.FailedPrecondition, codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated:
		return false
	}
	return true
}

// joinSorted joins the errors of m in the order of their keys.
func joinSorted(m map[string]error) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(m)) {
		errs = append(errs, m[k])
	}
	return errors.Join(errs...)
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

// rebindBroken binds again the targets of a healthy staging mount that are broken: the
// staging mount was repaired but the plugin stopped before binding them all.
func (s *Server) rebindBroken(ctx context.Context, rec *record) error {
	var errs []error
	for _, t := range rec.Targets {
		state, _, err := mount.Inspect(ctx, t.Path, s.opts.Timeout)
		if err != nil || state != mount.Broken {
			continue
		}
		if err := hostmount.LazyUnmount(ctx, s.x, t.Path); err != nil {
			errs = append(errs, err)
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
	if pids, err := mount.FuseDaemons("/proc", mount.FuseSocket(dir)); err != nil || len(pids) > 0 {
		log.Info("Keeping a work directory without a staging record: its ceph-fuse daemon still runs", "pids", pids)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		log.Error(err, "Removing a work directory without a staging record")
		return
	}
	log.Info("Removed a work directory without a staging record")
}
