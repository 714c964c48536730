package snapmeta

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Changed blocks of ceph-csi's snapshots.
//
// A ceph-csi snapshot of volume V is a clone image C with one snapshot C@C; the point in time is
// a snapshot of V in V's trash namespace, C's parent. So:
//
//   - allocated extents: librbd's diff of C@C from its beginning, parents included (C has no
//     data of its own), as for any image;
//   - the delta between two snapshots of V: the diff of V between the two trash snapshots, the
//     parents of the two clones. librbd can name those only by ID: rbd_diff_iterate3
//     (DiffIterateByID), in Reef 18.2.5 and later, found at run time;
//   - where librbd lacks it (Pacific, Reef before 18.2.5) or a clone was flattened (it has no
//     parent to diff), the two clones' data are compared instead: what either has allocated
//     is read from both and compared in compareBlock pieces. Exact in content, but it reads
//     both snapshots' data; with Options.NoReadCompare such a query is refused with
//     FAILED_PRECONDITION naming what is needed.

// compareBlock is the granularity of read-compare deltas: the filesystems' block size, so a
// changed file block is one extent.
const compareBlock = 4096

// compareChunk is how much of both images one read-compare step holds.
const compareChunk = 4 << 20

// produceCephCSI serves a query on ceph-csi snapshots: both IDs are ceph-csi handles of the
// same cluster and pool (check made sure).
func (e *Engine) produceCephCSI(ctx context.Context, conn *ceph.Conn, q Query, hdr *Header, msgs chan<- []Extent) error {
	h := *q.Target.CSI
	cl, err := e.ctrl.Clusters.Cluster(h.ClusterID)
	if err != nil {
		return status.Errorf(codes.NotFound, "snapshot %s: %v", h.String(), err)
	}
	pool, err := ceph.Call(ctx, conn, "look up pool", func(r *rados.Conn) (string, error) { return r.GetPoolByID(h.LocationID) })
	if err != nil {
		return notFound(err, "snapshot %s does not exist (pool %d: %v)", h.String(), h.LocationID, err)
	}
	loc := radosop.Location{Conn: conn, Pool: pool, Namespace: cl.RBD.RadosNamespace}
	target, err := csiSnapshotEntry(ctx, loc, h, "snapshot")
	if err != nil {
		return err
	}
	var base *cephcsi.Entry
	if q.Base != nil {
		if base, err = csiSnapshotEntry(ctx, loc, *q.Base.CSI, "base snapshot"); err != nil {
			return err
		}
	}
	if err := refuseBlockEncrypted(target, "snapshot", h); err != nil {
		return err
	}
	if base != nil {
		if err := refuseBlockEncrypted(base, "base snapshot", *q.Base.CSI); err != nil {
			return err
		}
		if base.Attrs[cephcsi.KeySource] != target.Attrs[cephcsi.KeySource] {
			return status.Errorf(codes.InvalidArgument, "base snapshot %s (of image %s) and target snapshot %s (of image %s) are snapshots of different volumes",
				q.Base.String(), base.Attrs[cephcsi.KeySource], h.String(), target.Attrs[cephcsi.KeySource])
		}
	}
	_, err = ceph.Call(ctx, conn, "diff ceph-csi snapshot "+h.String(), func(r *rados.Conn) (struct{}, error) {
		done, err := e.turn(ctx)
		if err != nil {
			return struct{}{}, err
		}
		defer done()
		io, err := r.OpenIOContext(pool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		io.SetNamespace(loc.Namespace)
		if base == nil {
			img, err := openSnapImage(io, target.ImageName(), target.ImageName())
			if err != nil {
				return struct{}{}, notFound(err, "snapshot %s does not exist", h.String())
			}
			e.openImages.Add(1)
			defer func() {
				_ = img.close()
				e.openImages.Add(-1)
			}()
			return struct{}{}, e.iterate(ctx, io, img, q, hdr, msgs)
		}
		return struct{}{}, e.deltaCephCSI(ctx, r, io, q, base.ImageName(), target.ImageName(), hdr, msgs)
	})
	return innerStatus(err)
}

// csiSnapshotEntry reads a ceph-csi snapshot's journal entry; missing is NOT_FOUND.
func csiSnapshotEntry(ctx context.Context, loc radosop.Location, h volid.Handle, what string) (*cephcsi.Entry, error) {
	e, err := cephcsi.Read(ctx, loc, cephcsi.Snapshots, h.UUID)
	if err != nil {
		return nil, err
	}
	if e == nil || e.Name == "" {
		return nil, status.Errorf(codes.NotFound, "%s %s does not exist", what, h.String())
	}
	return e, nil
}

// refuseBlockEncrypted is the answer for a snapshot of a volume ceph-csi encrypted with
// dm-crypt: its image starts with ceph-csi's LUKS header, whose size monoceph does not know,
// so the image's offsets are not the volume's and serving them would corrupt a backup
// silently. File encryption (fscrypt) leaves the offsets the volume's.
func refuseBlockEncrypted(e *cephcsi.Entry, what string, h volid.Handle) error {
	if !e.BlockEncrypted() {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s %s is of a volume encrypted by ceph-csi (dm-crypt, KMS %q): the size of ceph-csi's LUKS header is not known to monoceph, and the offsets of its changed blocks would include it",
		what, h.String(), e.Attrs[cephcsi.KeyEncryptKMS])
}

// imageMetadata reads img's metadata key as snapImage.metadata does.
func imageMetadata(img *rbd.Image) func(key string) (string, bool, error) {
	return func(key string) (string, bool, error) {
		v, err := img.GetMetadata(key)
		if errors.Is(err, rbd.ErrNotFound) {
			return "", false, nil
		}
		return v, err == nil, err
	}
}

// deltaCephCSI streams the changes from clone image baseImg's snapshot to targetImg's.
func (e *Engine) deltaCephCSI(ctx context.Context, r *rados.Conn, io *rados.IOContext, q Query, baseImg, targetImg string, hdr *Header, msgs chan<- []Extent) error {
	t, err := rbd.OpenImageReadOnly(io, targetImg, targetImg)
	if err != nil {
		return notFound(err, "snapshot %s does not exist", q.Target.String())
	}
	defer t.Close()
	b, err := rbd.OpenImageReadOnly(io, baseImg, baseImg)
	if err != nil {
		return notFound(err, "base snapshot %s does not exist", q.Base.String())
	}
	defer b.Close()
	// the journal may not say it (written by another tool): the images' metadata does
	for _, x := range []struct {
		img  *rbd.Image
		name string
	}{{t, targetImg}, {b, baseImg}} {
		if err := refuseCephCSIImage(x.name, imageMetadata(x.img)); err != nil {
			return err
		}
	}
	size, err := t.GetSize()
	if err != nil {
		return err
	}
	if uint64(q.StartingOffset) >= size {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is not below the volume size %d", q.StartingOffset, size)
	}
	unit, err := t.GetStripeUnit()
	if err != nil {
		return err
	}
	*hdr = Header{Style: e.opts.Style, Capacity: int64(size), BlockSize: int64(unit)}
	queue := func(m []Extent) error {
		select {
		case msgs <- m:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	asm := newAssembler(e.opts.Style, hdr.BlockSize, q.StartingOffset, maxResults(q.MaxResults), queue)
	begin := uint64(asm.start)
	log := klog.FromContext(ctx)

	// which way a delta goes is logged at -v=2: comparing data reads both snapshots
	why := "the snapshot images share no parent (one was flattened)"
	tp, terr := t.GetParent()
	bp, berr := b.GetParent()
	if terr == nil && berr == nil && tp.Image.ImageID == bp.Image.ImageID && tp.Image.PoolName == bp.Image.PoolName && tp.Image.PoolNamespace == bp.Image.PoolNamespace {
		if bp.Snap.ID > tp.Snap.ID {
			return status.Errorf(codes.InvalidArgument, "base snapshot %s was taken after target snapshot %s", q.Base.String(), q.Target.String())
		}
		err := diffByID(ctx, r, tp, bp, begin, size-begin, asm)
		if err == nil {
			log.V(2).Info("Delta of ceph-csi snapshots by snapshot ID", "image", tp.Image.ImageName)
			return asm.finish()
		}
		if !errors.Is(err, rbd.ErrNotImplemented) {
			return err
		}
		why = "librbd has no rbd_diff_iterate3 (Ceph before Reef 18.2.5)"
	} else if err := olderImage(b, t, q); err != nil {
		return err
	}
	if e.opts.NoReadCompare {
		return status.Errorf(codes.FailedPrecondition,
			"the changes between ceph-csi snapshots %s and %s need librbd's rbd_diff_iterate3 (Ceph Reef 18.2.5 or later) and both snapshot images unflattened; comparing their data instead is turned off (--snapshot-metadata-read-compare=false)",
			q.Base.String(), q.Target.String())
	}
	log.V(2).Info("Delta of ceph-csi snapshots by comparing their data", "base", baseImg, "target", targetImg, "reason", why)
	if err := readCompare(ctx, b, t, begin, size, asm); err != nil {
		return err
	}
	return asm.finish()
}

// olderImage checks, where the snapshots' IDs cannot be compared (no common parent), that the
// base's snapshot image was made before the target's.
func olderImage(b, t *rbd.Image, q Query) error {
	bt, err := b.GetCreateTimestamp()
	if err != nil {
		return err
	}
	tt, err := t.GetCreateTimestamp()
	if err != nil {
		return err
	}
	if time.Unix(bt.Sec, bt.Nsec).After(time.Unix(tt.Sec, tt.Nsec)) {
		return status.Errorf(codes.InvalidArgument, "base snapshot %s was taken after target snapshot %s", q.Base.String(), q.Target.String())
	}
	return nil
}

// diffByID diffs the clones' common parent image from the base's point in time to the
// target's, through rbd_diff_iterate3; ErrNotImplemented where librbd lacks it.
func diffByID(ctx context.Context, r *rados.Conn, tp, bp *rbd.ParentInfo, off, length uint64, asm *assembler) error {
	pio, err := r.OpenIOContext(tp.Image.PoolName)
	if err != nil {
		return err
	}
	defer pio.Destroy()
	pio.SetNamespace(tp.Image.PoolNamespace)
	img, err := rbd.OpenImageByIdReadOnly(pio, tp.Image.ImageID, rbd.NoSnapshot)
	if err != nil {
		return err
	}
	defer img.Close()
	if err := img.SetSnapByID(tp.Snap.ID); err != nil {
		return err
	}
	var cbErr error
	err = img.DiffIterateByID(rbd.DiffIterateByIDConfig{FromSnapID: bp.Snap.ID, Offset: off, Length: length,
		IncludeParent: rbd.IncludeParent, WholeObject: rbd.DisableWholeObject,
		Callback: func(o uint64, l uint64, _ int, _ interface{}) int {
			if ctx.Err() != nil {
				cbErr = ctx.Err()
			} else {
				cbErr = asm.add(int64(o), int64(l))
			}
			if cbErr != nil {
				return errStopped
			}
			return 0
		}})
	if cbErr != nil {
		return cbErr
	}
	return err
}

// allocatedObjects lists the whole objects img has data in at its snapshot, parents included.
func allocatedObjects(img *rbd.Image, size uint64) ([]Extent, error) {
	var out []Extent
	err := img.DiffIterate(rbd.DiffIterateConfig{Offset: 0, Length: size, IncludeParent: rbd.IncludeParent, WholeObject: rbd.EnableWholeObject,
		Callback: func(o uint64, l uint64, exists int, _ interface{}) int {
			if exists != 0 {
				out = append(out, Extent{Offset: int64(o), Length: int64(l)})
			}
			return 0
		}})
	return out, err
}

// union merges two sorted extent lists into one of disjoint, sorted extents.
func union(a, b []Extent) []Extent {
	all := append(append([]Extent(nil), a...), b...)
	sort.Slice(all, func(i, j int) bool { return all[i].Offset < all[j].Offset })
	var out []Extent
	for _, x := range all {
		if n := len(out); n > 0 && x.Offset <= out[n-1].End() {
			if x.End() > out[n-1].End() {
				out[n-1].Length = x.End() - out[n-1].Offset
			}
			continue
		}
		out = append(out, x)
	}
	return out
}

// readCompare adds to asm every compareBlock of [begin, size) whose content differs between
// snapshot images b and t, reading only what either has allocated (the rest reads as zeros
// in both). Beyond the base's size (the volume grew) the base reads as zeros.
func readCompare(ctx context.Context, b, t *rbd.Image, begin, size uint64, asm *assembler) error {
	bsize, err := b.GetSize()
	if err != nil {
		return err
	}
	ta, err := allocatedObjects(t, size)
	if err != nil {
		return err
	}
	ba, err := allocatedObjects(b, bsize)
	if err != nil {
		return err
	}
	tbuf, bbuf := make([]byte, compareChunk), make([]byte, compareChunk)
	for _, x := range union(ta, ba) {
		from, to := max(uint64(x.Offset), begin), min(uint64(x.End()), size)
		for off := from; off < to; off += compareChunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(compareChunk, to-off)
			if _, err := t.ReadAt(tbuf[:n], int64(off)); err != nil {
				return err
			}
			clear(bbuf[:n])
			if off < bsize {
				if _, err := b.ReadAt(bbuf[:min(n, bsize-off)], int64(off)); err != nil {
					return err
				}
			}
			for i := uint64(0); i < n; i += compareBlock {
				j := min(i+compareBlock, n)
				if !bytes.Equal(tbuf[i:j], bbuf[i:j]) {
					if err := asm.add(int64(off+i), int64(j-i)); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}
