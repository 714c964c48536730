package inventory

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
)

// journal attributes of RBD snapshot reservations (internal/rbd/snapshot.go)
const (
	attrSourceVolume = "sourceVolume"
	attrCreated      = "created"
)

var ownerKeys = append(append([]string{owner.ClusterName}, owner.VolumeKeys...), owner.SnapshotKeys...)

// ScanRBD lists the volumes and snapshots monoceph's journal knows in one pool and RADOS
// namespace, the images named like monoceph's without a journal entry, and monoceph's images
// in the trash. Each existing image is opened read-only once, for its creation time, its
// ownership keys and its snapshots.
func ScanRBD(ctx context.Context, loc radosop.Location, clusterID string, poolID int64) ([]Object, error) {
	vols, err := journal.List(ctx, loc, journal.Volume)
	if err != nil {
		return nil, err
	}
	snaps, err := journal.List(ctx, loc, journal.Snapshot)
	if err != nil {
		return nil, err
	}
	return radosop.With(ctx, loc, "inventory", func(io *rados.IOContext) ([]Object, error) {
		names, err := rbd.GetImageNames(io)
		if err != nil {
			return nil, err
		}
		exists := map[string]bool{}
		for _, n := range names {
			exists[n] = true
		}
		trash, err := rbd.GetTrashList(io)
		if err != nil && !errors.Is(err, rbd.ErrNotFound) {
			return nil, err
		}
		trashed := map[string]rbd.TrashInfo{}
		for _, t := range trash {
			if strings.HasPrefix(t.Name, rbdname.VolumePrefix) {
				trashed[t.Name] = t
			}
		}
		base := Object{Cluster: clusterID, Pool: loc.Pool, Namespace: loc.Namespace, Format: "monoceph"}
		images := map[string]imageFacts{}
		var out []Object
		journaled := map[string]bool{}
		for _, r := range vols {
			name := rbdname.Image(r.UID)
			journaled[name] = true
			o := base
			o.Kind, o.Name, o.RequestName, o.Journaled, o.Exists = Volume, name, r.Name, true, exists[name]
			o.Handle = volid.RBDVolume{ClusterID: clusterID, PoolID: poolID, Namespace: loc.Namespace, UID: r.UID}.String()
			if t, ok := trashed[name]; ok && !o.Exists {
				o.Trashed, o.Created = true, t.DeletionTime
				delete(trashed, name)
			}
			if o.Exists {
				f, err := readImage(io, name)
				switch {
				case errors.Is(err, rbd.ErrNotFound):
					o.Exists = false // deleted between the listing and the open
				case err != nil:
					return nil, err
				default:
					images[name] = f
					o.Created, o.Owner = f.created, f.owner
				}
			}
			out = append(out, o)
		}
		for _, n := range names {
			if strings.HasPrefix(n, rbdname.VolumePrefix) && !journaled[n] {
				o := base
				o.Kind, o.Name, o.Exists = Volume, n, true
				if f, err := readImage(io, n); err == nil {
					// a deleted volume's image kept for its snapshots is trash in all but place
					o.Created, o.Owner, o.Trashed = f.created, f.owner, f.deleted
				}
				out = append(out, o)
			}
		}
		for _, r := range snaps {
			src, err := volid.ParseRBDVolume(r.Attrs[attrSourceVolume])
			if err != nil {
				continue // a reservation of another format is not listed as ours
			}
			image, snap := rbdname.Image(src.UID), rbdname.Snapshot(r.UID)
			o := base
			o.Kind, o.Name, o.RequestName, o.Journaled = Snapshot, image+"@"+snap, r.Name, true
			o.Handle = volid.RBDSnapshot{RBDVolume: src, SnapUID: r.UID}.String()
			o.Exists = images[image].snaps[snap]
			o.Created, _ = time.Parse(time.RFC3339Nano, r.Attrs[attrCreated])
			o.Owner = owner.Keys{}
			for _, k := range ownerKeys {
				if v, ok := r.Attrs[k]; ok {
					o.Owner[k] = v
				}
			}
			out = append(out, o)
		}
		for _, t := range trashed {
			o := base
			o.Kind, o.Name, o.Trashed, o.Created = Volume, t.Name, true, t.DeletionTime
			out = append(out, o)
		}
		return out, nil
	})
}

type imageFacts struct {
	created time.Time
	owner   owner.Keys
	snaps   map[string]bool
	deleted bool // DeleteVolume hid it (internal/rbd's monoceph.deleted): its snapshots hold it
}

func readImage(io *rados.IOContext, name string) (imageFacts, error) {
	img, err := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
	if err != nil {
		return imageFacts{}, err
	}
	defer img.Close()
	f := imageFacts{owner: owner.Keys{}, snaps: map[string]bool{}}
	if ts, err := img.GetCreateTimestamp(); err == nil {
		f.created = time.Unix(ts.Sec, ts.Nsec).UTC()
	}
	for _, k := range ownerKeys {
		if v, err := img.GetMetadata(k); err == nil {
			f.owner[k] = v
		}
	}
	if v, err := img.GetMetadata("monoceph.deleted"); err == nil && v == "true" {
		f.deleted = true
	}
	ss, err := img.GetSnapshotNames()
	if err != nil {
		return imageFacts{}, err
	}
	for _, s := range ss {
		f.snaps[s.Name] = true
	}
	return f, nil
}
