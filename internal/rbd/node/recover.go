package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// keepsRecoveryKey reports whether rec's volume keeps a recovery key: a fuse volume whose
// image the mount holder serves, which Recover hands to the next holder.
func (s *Server) keepsRecoveryKey(rec *record) bool {
	return s.opts.FuseAttacher != nil && rec.Mounter == volumecontext.MounterFuse
}

// Recover reattaches the fuse volumes staged on this node through the mount holder
// (Options.FuseAttacher); without one it does nothing. The driver calls it whenever it finds a
// holder it has not seen: after this plugin started, the holder hands over the FUSE
// connections it serves (the plugin keeps them from then on); after the holder restarted, the
// plugin hands each connection to the new holder, which resumes serving it. Either way the
// loop devices and what is mounted on them stay. An attachment whose connection is gone (both
// restarted at once, or the node rebooted) is not replaced under the filesystem mounted on its
// old device: health reports it and the volume must be staged again.
//
// Volumes another operation holds are left to it; failures time may cure are retried with
// Options.RecoverBackoff until ctx ends. It returns what it could not reattach.
func (s *Server) Recover(ctx context.Context) error {
	if s.opts.FuseAttacher == nil {
		return nil
	}
	dirs, err := nodestate.WorkDirs(s.opts.StateDir)
	if err != nil {
		return fmt.Errorf("rbd node recovery: %w", err)
	}
	n, err := nodereq.RecoverAll(ctx, "RBD node recovery", dirs, s.opts.RecoverBackoff, s.recoverDir)
	klog.FromContext(ctx).Info("RBD node recovery done", "volumes", len(dirs), "reattached", n, "failed", err != nil)
	return err
}

func (s *Server) recoverDir(ctx context.Context, dir string) (bool, error) {
	stagingPath, ok, err := nodestate.IndexedStagingPath(dir)
	if err != nil || !ok {
		return false, err
	}
	rec, err := s.loadRecord(stagingPath)
	if err != nil || rec == nil || rec.Attachment.WorkDir != dir {
		return false, err
	}
	if rec.State != stateStaged || rec.Mounter != volumecontext.MounterFuse {
		return false, nil // an interrupted stage is redone by the CO's retry
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "Recover", rec.VolumeID, "stagingPath", rec.StagingPath)
	if err != nil {
		return false, nil // an RPC is on it
	}
	defer unlock()
	if err := s.reattach(ctx, rec); err != nil {
		return false, fmt.Errorf("volume %q at %s: %w", rec.VolumeID, rec.StagingPath, err)
	}
	log.V(2).Info("Volume reattached", "device", rec.Attachment.Device)
	return true, nil
}

// reattach confirms rec's attachment with the holder, handing over its connection.
func (s *Server) reattach(ctx context.Context, rec *record) error {
	key, err := nodestate.LoadRecoveryKey(rec.Attachment.WorkDir)
	if errors.Is(err, fs.ErrNotExist) {
		return status.Error(codes.FailedPrecondition, "no recovery key kept; the next NodeStageVolume reattaches it")
	}
	if err != nil {
		return status.Errorf(codes.Internal, "reading the recovery key: %v", err)
	}
	cred, err := ceph.NewCredentials(rec.CephUser, key)
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "recovery credentials: %v", err)
	}
	cluster, err := s.opts.Clusters.RBDCluster(rec.ClusterID)
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	a, err := s.attachers[volumecontext.MounterFuse].Attach(ctx, attach.Request{Image: rec.Attachment.Image, MonHost: cluster.MonHost(),
		Cred: cred, ReadOnly: rec.ReadOnly, WorkDir: rec.Attachment.WorkDir, KeepOnly: true, CrushLocation: s.crushLocation(ctx, cluster)})
	if err != nil {
		return reattachStatus(rec.Attachment.Image.Spec(), err)
	}
	if a.Device != rec.Attachment.Device {
		// KeepOnly never makes a new device: the holder found another one on the same file
		klog.FromContext(ctx).Info("The image's loop device is not the recorded one", "recorded", rec.Attachment.Device, "now", a.Device)
	}
	rec.Attachment = a
	if err := rec.write(); err != nil {
		return status.Errorf(codes.Internal, "writing the staging record: %v", err)
	}
	return nil
}

// reattachStatus is the status of a failed reattach. Only the node's own verdicts are final
// there: the image is gone, its connection is lost, or its mounter is missing. A refusal of
// Ceph's, of any class, answers UNAVAILABLE, which Recover retries (nodereq.Retryable) until its
// context ends: after a restart the cluster, the network and the dead holder's session settle
// (a lock or watch the old holder kept, a monitor name DNS cannot resolve yet, cephx under a
// skewed clock), and the CO never stages a staged volume again to heal it.
func reattachStatus(spec string, err error) error {
	st := errorStatus("reattaching image "+spec, err)
	var unavailable *attach.UnavailableError
	if errors.Is(err, attach.ErrImageNotFound) || errors.Is(err, attach.ErrConnectionLost) || errors.As(err, &unavailable) {
		return st
	}
	if nodereq.Retryable(st) {
		return st
	}
	return status.Error(codes.Unavailable, status.Convert(st).Message())
}
