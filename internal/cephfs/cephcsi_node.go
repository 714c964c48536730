package cephfs

import (
	"context"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CephCSIShallowResolver finds the snapshot one of ceph-csi's shallow volumes exposes, for the
// node: ceph-csi gave such a volume a context naming only the snapshot's subvolume, and its own
// node plugin reads the rest from the journal at stage. The node's Ceph user needs read access
// to the metadata pool's namespace (ceph-csi's node users have it).
type CephCSIShallowResolver struct {
	Clusters *clustermap.Store
	Pool     *ceph.Pool
	fss      fsCache
}

// Snapshot returns the CephFS snapshot name of ceph-csi shallow volume volumeID.
func (r *CephCSIShallowResolver) Snapshot(ctx context.Context, clusterID, volumeID string, cred ceph.Credentials) (string, error) {
	h, err := volid.ParseHandle(volumeID)
	if err != nil {
		return "", status.Errorf(codes.InvalidArgument, "volume_id %q: the volume context is ceph-csi's shallow volume's, the ID is not ceph-csi's: %v", volumeID, err)
	}
	cl, err := r.Clusters.Cluster(clusterID)
	if err != nil {
		return "", status.Error(codes.FailedPrecondition, err.Error())
	}
	conn, err := r.Pool.Get(ctx, cl.MonHost(), cred)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	fs, err := r.fss.lookup(ctx, clusterID, conn, "", h.LocationID)
	if err != nil {
		return "", notFoundOr(err, "filesystem of volume "+volumeID)
	}
	loc := journalAt(conn, fs, journalNamespace(cl))
	e, err := cephcsi.Read(ctx, loc, cephcsi.Volumes, h.UUID)
	if err != nil {
		return "", err
	}
	if e == nil || e.Attrs[cephcsi.KeyBackingSnapshot] == "" {
		return "", status.Errorf(codes.NotFound, "volume %q has no ceph-csi journal entry naming its snapshot", volumeID)
	}
	sh, err := volid.ParseHandle(e.Attrs[cephcsi.KeyBackingSnapshot])
	if err != nil {
		return "", status.Errorf(codes.NotFound, "volume %q names snapshot %q, which is not a ceph-csi handle", volumeID, e.Attrs[cephcsi.KeyBackingSnapshot])
	}
	se, err := cephcsi.Read(ctx, loc, cephcsi.Snapshots, sh.UUID)
	if err != nil {
		return "", err
	}
	if se == nil {
		return "", status.Errorf(codes.NotFound, "the snapshot of volume %q (%s) has no ceph-csi journal entry", volumeID, sh.String())
	}
	return se.ImageName(), nil
}

func notFoundOr(err error, what string) error {
	if isNotFound(err) {
		return status.Errorf(codes.NotFound, "%s does not exist: %v", what, err)
	}
	return err
}
