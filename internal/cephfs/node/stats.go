package node

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodereq"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeGetVolumeStats implements csi.NodeServer. A regular volume reports statfs of the mount:
// both ceph-fuse and the kernel client show the subvolume's quota as the filesystem size and
// its recursive usage as used. A shallow volume is a read-only snapshot: it reports the
// snapshot's recursive size and entry count (CephFS's ceph.dir.rbytes and ceph.dir.rentries)
// as both total and used, and nothing available. It takes no volume lock: statistics must not
// wait for, or fail because of, a stage or publish.
func (s *Server) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	r, err := nodereq.ParsePath(req.GetVolumeId(), "volume_path", req.GetVolumePath(), req.GetStagingTargetPath(), true)
	if err != nil {
		return nil, err
	}
	rec, err := s.findRecord(r.VolumeID, r.StagingPath)
	if err != nil {
		return nil, internal("reading the staging record", err)
	}
	if rec == nil || rec.State != stateStaged {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", r.VolumeID)
	}
	if r.VolumePath != rec.StagingPath && !rec.hasTarget(r.VolumePath) {
		return nil, status.Errorf(codes.NotFound, "volume %q is not published at %s", r.VolumeID, r.VolumePath)
	}
	state, _, err := mount.Inspect(ctx, r.VolumePath, s.opts.Timeout)
	switch {
	case err != nil:
		return nil, errorStatus("checking volume_path", err)
	case state == mount.NotMounted:
		return nil, status.Errorf(codes.NotFound, "volume %q is not mounted at %s", r.VolumeID, r.VolumePath)
	case state == mount.Broken:
		// CSI 1.13 has no volume_condition any more; NodeGetVolumeHealth reports it
		return nil, status.Errorf(codes.FailedPrecondition, "the %s mount of volume %q at %s is broken (%s); the next NodeStageVolume or NodePublishVolume remounts it",
			rec.Mounter, r.VolumeID, r.VolumePath, brokenReason)
	}
	if rec.Shallow != nil {
		dir := r.VolumePath
		if r.VolumePath == rec.StagingPath {
			dir = filepath.Join(rec.StagingPath, rec.Shallow.SnapshotDir)
		}
		return s.snapshotStats(ctx, dir)
	}
	st, err := s.statfs(ctx, r.VolumePath)
	if err != nil {
		return nil, err
	}
	bsize := st.Bsize
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bsize, Available: int64(st.Bavail) * bsize, Used: int64(st.Blocks-st.Bfree) * bsize},
		// CephFS has no inode limit: ceph-fuse reports the files in use as the total and no
		// free ones (Ffree is -1 from the kernel's point of view)
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: max(0, int64(st.Ffree)), Used: max(0, int64(st.Files)-max(0, int64(st.Ffree)))},
	}}, nil
}

const brokenReason = "transport endpoint is not connected"

// fsCallStatus is the status of a failed bounded filesystem call on a volume's mount.
func fsCallStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case hostmount.Unresponsive(err):
		return status.Errorf(codes.Unavailable, "the mount does not answer: %v", err)
	case mount.IsBroken(err):
		return status.Errorf(codes.FailedPrecondition, "the mount is broken (%s): %v", brokenReason, err)
	}
	return status.Error(codes.Internal, err.Error())
}

func (s *Server) snapshotStats(ctx context.Context, dir string) (*csi.NodeGetVolumeStatsResponse, error) {
	bytes, err := s.dirStat(ctx, dir, "ceph.dir.rbytes")
	if err != nil {
		return nil, err
	}
	entries, err := s.dirStat(ctx, dir, "ceph.dir.rentries")
	if err != nil {
		return nil, err
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: bytes, Used: bytes, Available: 0},
		{Unit: csi.VolumeUsage_INODES, Total: entries, Used: entries, Available: 0},
	}}, nil
}

// statfs is statfs(2) of a volume's path, bounded like Inspect's stat: a mount that stopped
// answering between the two is UNAVAILABLE.
func (s *Server) statfs(ctx context.Context, p string) (unix.Statfs_t, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	st, err := hostmount.StatfsWithin(ctx, p)
	return st, fsCallStatus(err)
}

// dirStat reads one of CephFS's recursive directory statistics (virtual extended attributes),
// bounded like statfs.
func (s *Server) dirStat(ctx context.Context, dir, name string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	b, err := hostmount.GetxattrWithin(ctx, dir, name, 32)
	if err != nil {
		return 0, fsCallStatus(err)
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, internal(fmt.Sprintf("%s of %s", name, dir), err)
	}
	return v, nil
}

// NodeGetVolumeHealth implements csi.NodeServer (alpha in CSI 1.13, where it replaced
// NodeGetVolumeStats' volume_condition): a staged volume whose mount is broken or gone, at the
// staging path or at the given publish path, is INACCESSIBLE from this node.
func (s *Server) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	r, err := nodereq.ParsePath(req.GetVolumeId(), "volume_publish_path", req.GetVolumePublishPath(), req.GetStagingTargetPath(), false)
	if err != nil {
		return nil, err
	}
	rec, err := s.findRecord(r.VolumeID, r.StagingPath)
	if err != nil {
		return nil, internal("reading the staging record", err)
	}
	if rec == nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not staged on this node", r.VolumeID)
	}
	reason, msg := s.check(ctx, rec, r.VolumePath)
	return nodereq.Health(rec.VolumeID, reason, msg), nil
}

// check returns a CamelCase reason and a message when the staged volume does not work.
func (s *Server) check(ctx context.Context, rec *record, publishPath string) (reason, msg string) {
	if rec.State != stateStaged {
		return "NotStaged", "staging did not complete"
	}
	paths := []string{rec.StagingPath}
	if publishPath != "" {
		paths = append(paths, publishPath)
	}
	for _, p := range paths {
		state, _, err := mount.Inspect(ctx, p, s.opts.Timeout)
		switch {
		case err != nil:
			return "Unresponsive", err.Error()
		case state == mount.Broken:
			return "MountBroken", fmt.Sprintf("the %s mount at %s is broken (%s)", rec.Mounter, p, brokenReason)
		case state == mount.NotMounted:
			return "NotMounted", fmt.Sprintf("nothing is mounted at %s", p)
		}
	}
	return "", ""
}
