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
		sc, err := listPool(io, Object{Cluster: clusterID, Pool: loc.Pool, Namespace: loc.Namespace, Format: "monoceph"})
		if err != nil {
			return nil, err
		}
		out, err := sc.volumes(vols, poolID)
		if err != nil {
			return nil, err
		}
		out = append(out, sc.strays()...)
		out = append(out, sc.snapshots(snaps)...)
		for _, t := range sc.trashed {
			o := sc.base
			o.Kind, o.Name, o.Trashed, o.Created = Volume, t.Name, true, t.DeletionTime
			out = append(out, o)
		}
		return out, nil
	})
}

// rbdScan is what one pool's scan learns as it goes: the image names, monoceph's images in
// the trash (those a journaled volume does not claim), the facts of each image opened, and
// which images the journal names.
type rbdScan struct {
	io        *rados.IOContext
	base      Object
	names     []string
	exists    map[string]bool
	trashed   map[string]rbd.TrashInfo
	images    map[string]imageFacts
	journaled map[string]bool
}

func listPool(io *rados.IOContext, base Object) (*rbdScan, error) {
	names, err := rbd.GetImageNames(io)
	if err != nil {
		return nil, err
	}
	sc := &rbdScan{io: io, base: base, names: names, exists: map[string]bool{}, trashed: map[string]rbd.TrashInfo{},
		images: map[string]imageFacts{}, journaled: map[string]bool{}}
	for _, n := range names {
		sc.exists[n] = true
	}
	trash, err := rbd.GetTrashList(io)
	if err != nil && !errors.Is(err, rbd.ErrNotFound) {
		return nil, err
	}
	for _, t := range trash {
		if strings.HasPrefix(t.Name, rbdname.VolumePrefix) {
			sc.trashed[t.Name] = t
		}
	}
	return sc, nil
}

// volumes lists the journal's volumes, each with its image (or its place in the trash).
func (sc *rbdScan) volumes(vols []journal.Record, poolID int64) ([]Object, error) {
	var out []Object
	for _, r := range vols {
		name := rbdname.Image(r.UID)
		sc.journaled[name] = true
		o := sc.base
		o.Kind, o.Name, o.RequestName, o.Journaled, o.Exists = Volume, name, r.Name, true, sc.exists[name]
		o.Handle = volid.RBDVolume{ClusterID: sc.base.Cluster, PoolID: poolID, Namespace: sc.base.Namespace, UID: r.UID}.String()
		if t, ok := sc.trashed[name]; ok && !o.Exists {
			o.Trashed, o.Created = true, t.DeletionTime
			delete(sc.trashed, name)
		}
		if o.Exists {
			f, err := readImage(sc.io, name)
			switch {
			case errors.Is(err, rbd.ErrNotFound):
				o.Exists = false // deleted between the listing and the open
			case err != nil:
				return nil, err
			default:
				sc.images[name] = f
				o.Created, o.Owner = f.created, f.owner
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// strays lists the images named like monoceph's that the journal does not name.
func (sc *rbdScan) strays() []Object {
	var out []Object
	for _, n := range sc.names {
		if strings.HasPrefix(n, rbdname.VolumePrefix) && !sc.journaled[n] {
			o := sc.base
			o.Kind, o.Name, o.Exists = Volume, n, true
			if f, err := readImage(sc.io, n); err == nil {
				// a deleted volume's image kept for its snapshots is trash in all but place
				o.Created, o.Owner, o.Trashed = f.created, f.owner, f.deleted
			}
			out = append(out, o)
		}
	}
	return out
}

// snapshots lists the journal's snapshots of monoceph's volumes, each found (or not) among
// its source image's snapshots.
func (sc *rbdScan) snapshots(snaps []journal.Record) []Object {
	var out []Object
	for _, r := range snaps {
		src, err := volid.ParseRBDVolume(r.Attrs[attrSourceVolume])
		if err != nil {
			continue // a reservation of another format is not listed as ours
		}
		image, snap := rbdname.Image(src.UID), rbdname.Snapshot(r.UID)
		o := sc.base
		o.Kind, o.Name, o.RequestName, o.Journaled = Snapshot, image+"@"+snap, r.Name, true
		o.Handle = volid.RBDSnapshot{RBDVolume: src, SnapUID: r.UID}.String()
		o.Exists = sc.images[image].snaps[snap]
		o.Created, _ = time.Parse(time.RFC3339Nano, r.Attrs[attrCreated])
		o.Owner = owner.Keys{}
		for _, k := range ownerKeys {
			if v, ok := r.Attrs[k]; ok {
				o.Owner[k] = v
			}
		}
		out = append(out, o)
	}
	return out
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
