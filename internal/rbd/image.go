package rbd

import (
	"fmt"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
)

// metaDeleted marks an image whose volume was deleted while CSI snapshots of it exist.
const (
	metaDeleted     = "monoceph.deleted"
	metaDeletedTrue = "true"
)

func isNotFound(err error) bool { return ceph.Is(err, ceph.ErrNotFound) }

// imageState is what the controller needs to know about an image.
type imageState struct {
	exists  bool
	size    uint64
	deleted bool // kept only for its snapshots
	parent  *rbd.ParentInfo
	snaps   []rbd.SnapInfo
	watches int
	// memberSnaps counts the snapshots group snapshots cut of the image (RBD's group snapshot
	// namespace): like CSI snapshots, they keep a deleted volume's image
	memberSnaps int
}

func (s imageState) csiSnapshots() []rbd.SnapInfo {
	var out []rbd.SnapInfo
	for _, sn := range s.snaps {
		if strings.HasPrefix(sn.Name, rbdname.SnapshotPrefix) {
			out = append(out, sn)
		}
	}
	return out
}

// kept reports whether snapshots a CSI snapshot or group snapshot may still restore from keep
// the image of a deleted volume.
func (s imageState) kept() bool { return len(s.csiSnapshots()) > 0 || s.memberSnaps > 0 }

func (s imageState) hasSnap(name string) (rbd.SnapInfo, bool) {
	for _, sn := range s.snaps {
		if sn.Name == name {
			return sn, true
		}
	}
	return rbd.SnapInfo{}, false
}

// inspect opens name read-only (read-only handles register no watch, so the watcher count is
// other clients only) and collects its state.
func inspect(io *rados.IOContext, name string) (imageState, error) {
	img, err := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
	if isNotFound(err) {
		return imageState{}, nil
	}
	if err != nil {
		return imageState{}, err
	}
	defer img.Close()
	st := imageState{exists: true}
	if st.size, err = img.GetSize(); err != nil {
		return st, err
	}
	if v, err := img.GetMetadata(metaDeleted); err == nil && v == metaDeletedTrue {
		st.deleted = true
	} else if err != nil && !isNotFound(err) {
		return st, err
	}
	if p, err := img.GetParent(); err == nil {
		st.parent = p
	} else if !isNotFound(err) {
		return st, err
	}
	if st.snaps, err = img.GetSnapshotNames(); err != nil {
		return st, err
	}
	for _, sn := range st.snaps {
		kind, err := img.GetSnapNamespaceType(sn.Id)
		if err != nil {
			return st, err
		}
		if kind == rbd.SnapNamespaceTypeGroup {
			st.memberSnaps++
		}
	}
	w, err := img.ListWatchers()
	if err != nil {
		return st, err
	}
	st.watches = len(w)
	return st, nil
}

func imageOptions(features []string, dataPool string) (*rbd.ImageOptions, error) {
	o := rbd.NewRbdImageOptions()
	if err := o.SetUint64(rbd.ImageOptionFeatures, featureBits(features)); err != nil {
		o.Destroy()
		return nil, err
	}
	if dataPool != "" {
		if err := o.SetString(rbd.ImageOptionDataPool, dataPool); err != nil {
			o.Destroy()
			return nil, err
		}
	}
	return o, nil
}

// createOrRepair runs create; when create says the image exists although it cannot be opened,
// a process was killed half way through librbd's multi-object create: remove the remains
// (rbd_remove cleans up partial images) and create again.
func createOrRepair(io *rados.IOContext, name string, create func() error) error {
	err := create()
	if err == nil || !ceph.Is(err, ceph.ErrExists) {
		return err
	}
	img, oerr := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
	if oerr == nil {
		img.Close()
		return nil // a concurrent create won; the caller re-inspects
	}
	if !isNotFound(oerr) {
		return oerr
	}
	if rerr := rbd.RemoveImage(io, name); rerr != nil && !isNotFound(rerr) {
		return fmt.Errorf("remove partial image %s: %w", name, rerr)
	}
	return create()
}

func resize(io *rados.IOContext, name string, size uint64) error {
	return withImage(io, name, func(img *rbd.Image) error { return growTo(img, size) })
}

// withImage opens an image for writing and runs fn on it.
func withImage(io *rados.IOContext, name string, fn func(*rbd.Image) error) error {
	img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
	if err != nil {
		return err
	}
	defer img.Close()
	return fn(img)
}

// growTo resizes an image to size unless it is that large already.
func growTo(img *rbd.Image, size uint64) error {
	cur, err := img.GetSize()
	if err != nil || cur >= size {
		return err
	}
	return img.Resize(size)
}

// dropInherited removes the image metadata a new image took along from its source but that
// describes the source: librbd's clone and copy copy the parent's metadata, so a volume restored
// from a snapshot of a deleted (hidden) volume would read as deleted too, and every later call
// on it (ControllerPublish, expand, modify) would answer NOT_FOUND.
func dropInherited(img *rbd.Image) error {
	if err := img.RemoveMetadata(metaDeleted); err != nil && !isNotFound(err) {
		return err
	}
	return dropInheritedOwner(img)
}

// depth counts the ancestors of an image, following parents into other pools and the trash.
func depth(r *rados.Conn, io *rados.IOContext, name string, limit int) (int, error) {
	img, err := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
	if err != nil {
		return 0, err
	}
	n := 0
	for ; n <= limit; n++ {
		p, err := img.GetParent()
		img.Close()
		if isNotFound(err) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		pio, err := r.OpenIOContext(p.Image.PoolName)
		if err != nil {
			return n, err
		}
		pio.SetNamespace(p.Image.PoolNamespace)
		img, err = rbd.OpenImageByIdReadOnly(pio, p.Image.ImageID, rbd.NoSnapshot)
		pio.Destroy()
		if err != nil {
			return n, err
		}
	}
	img.Close()
	return n, nil
}
