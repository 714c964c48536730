package rbd

import (
	"context"
	"maps"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
)

// setImageOwner writes the ownership keys onto an image's metadata (see owner.Writes for
// overwrite). Each key is read first, so a retried create writes nothing twice.
func setImageOwner(ctx context.Context, p radosop.Location, name string, want owner.Keys, overwrite bool) error {
	if len(want) == 0 {
		return nil
	}
	_, err := radosop.With(ctx, p, "set owner of "+name, func(io *rados.IOContext) (struct{}, error) {
		return struct{}{}, withImage(io, name, func(img *rbd.Image) error {
			have, err := imageOwner(img)
			if err != nil {
				return err
			}
			w := owner.Writes(have, want, overwrite)
			for _, k := range w.Sorted() {
				if err := img.SetMetadata(k, w[k]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return err
}

// ownerKeys are every key owner defines.
var ownerKeys = append(append([]string{owner.ClusterName}, owner.VolumeKeys...), owner.SnapshotKeys...)

// imageOwner reads the ownership keys an image carries.
func imageOwner(img *rbd.Image) (owner.Keys, error) {
	have := owner.Keys{}
	for _, k := range ownerKeys {
		v, err := img.GetMetadata(k)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		have[k] = v
	}
	return have, nil
}

// dropInheritedOwner removes the ownership keys a clone or copy took along from its source:
// they name the source's PV, and a clone whose request carries no names must not be attributed
// to it. Only new images (before their create finishes) pass here.
func dropInheritedOwner(img *rbd.Image) error {
	for _, k := range ownerKeys {
		if err := img.RemoveMetadata(k); err != nil && !isNotFound(err) {
			return err
		}
	}
	return nil
}

// setRecordOwner stores ownership keys in a journal reservation's attributes. RBD snapshots
// have no metadata of their own (image metadata is per image), so a snapshot's owner lives in
// its reservation, which the inventory reads anyway.
func setRecordOwner(ctx context.Context, p radosop.Location, k journal.Kind, rec *journal.Record, want owner.Keys) error {
	w := owner.Writes(rec.Attrs, want, true)
	if len(w) == 0 {
		return nil
	}
	if rec.Attrs == nil {
		rec.Attrs = map[string]string{}
	}
	maps.Copy(rec.Attrs, w)
	return journal.SetAttrs(ctx, p, k, rec)
}
