package inventory

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
)

// Wanted is the ownership an entry's PV (or VolumeSnapshotContent) gives it.
func Wanted(e Entry, cluster string) owner.Keys {
	ns, name, _ := strings.Cut(e.Claim, "/")
	keys := map[string]string{owner.PVName: e.PV, owner.PVCNamespace: ns, owner.PVCName: name}
	if e.Kind == Snapshot {
		keys = map[string]string{owner.SnapshotContentName: e.PV, owner.SnapshotNamespace: ns, owner.SnapshotName: name}
	}
	return owner.FromParams(keys, append(append([]string{}, owner.VolumeKeys...), owner.SnapshotKeys...), cluster)
}

// Backfill writes the ownership keys of every entry a PV or content names onto its object
// (images: image metadata; snapshots: their journal reservation, as CreateSnapshot does),
// adding only missing keys: values ceph-csi or a create wrote stay. It returns the entries
// that gained keys (or would, when dryRun).
func Backfill(ctx context.Context, entries []Entry, clusters map[string]v1.Cluster, connect Connector, cluster string, dryRun bool) ([]Entry, error) {
	var done []Entry
	for _, e := range entries {
		if e.PV == "" || e.Handle == "" || (e.State != Bound && e.State != InUse && e.State != Released) {
			continue
		}
		w := owner.Writes(e.Owner, Wanted(e, cluster), false)
		if len(w) == 0 {
			continue
		}
		if !dryRun {
			if err := writeOwner(ctx, e, clusters[e.Cluster], connect, w); err != nil {
				return done, fmt.Errorf("%s %s: %w", e.Kind, e.Object, err)
			}
		}
		e.Owner = maps.Clone(w)
		done = append(done, e)
	}
	return done, nil
}

func writeOwner(ctx context.Context, e Entry, c v1.Cluster, connect Connector, w owner.Keys) error {
	conn, err := connect(ctx, c)
	if err != nil {
		return err
	}
	defer conn.Release()
	loc := radosop.Location{Conn: conn, Pool: e.Pool, Namespace: e.Namespace}
	if e.Kind == Snapshot {
		s, err := volid.ParseRBDSnapshot(e.Handle)
		if err != nil {
			return err
		}
		rec, err := journal.Get(ctx, loc, journal.Snapshot, s.SnapUID)
		if err != nil || rec == nil {
			return ceph.NewError("backfill", ceph.ErrNotFound, "reservation gone: "+fmt.Sprint(err))
		}
		// a key written since the scan wins: only what is still missing is added
		w = owner.Writes(rec.Attrs, w, false)
		if len(w) == 0 {
			return nil
		}
		if rec.Attrs == nil {
			rec.Attrs = map[string]string{}
		}
		maps.Copy(rec.Attrs, w)
		return journal.SetAttrs(ctx, loc, journal.Snapshot, rec)
	}
	_, err = radosop.With(ctx, loc, "backfill "+e.Object, func(io *rados.IOContext) (struct{}, error) {
		img, err := rbd.OpenImage(io, e.Object, rbd.NoSnapshot)
		if err != nil {
			return struct{}{}, err
		}
		defer img.Close()
		for _, k := range w.Sorted() {
			if _, err := img.GetMetadata(k); err == nil {
				continue // written since the scan
			}
			if err := img.SetMetadata(k, w[k]); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	return err
}
