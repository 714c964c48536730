package snapmeta

/*
#cgo LDFLAGS: -lrbd
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <rbd/librbd.h>

// Extents are collected on librbd's callback thread and handed to Go a batch at a time: one
// cgo transition per batch instead of one per extent. go-ceph's DiffIterate calls into Go for
// every extent, and that transition costs as much as librbd's own work per extent.
#define SNAPMETA_BATCH 1024

typedef struct {
	uintptr_t handle;  // runtime/cgo.Handle of the Go receiver
	int data_only;     // drop ranges librbd reports as holes (allocated queries)
	int stopped;       // the Go side's negative answer, repeated to librbd from then on
	int n;
	uint64_t ext[2 * SNAPMETA_BATCH];
} snapmeta_batch;

extern int snapmetaDeliver(uintptr_t handle, uint64_t *ext, int n);

static int snapmeta_flush(snapmeta_batch *b) {
	int n = b->n;
	b->n = 0;
	int r = snapmetaDeliver(b->handle, b->ext, n);
	if (r < 0) {
		b->stopped = r;
	}
	return r;
}

static int snapmeta_cb(uint64_t off, size_t len, int exists, void *arg) {
	snapmeta_batch *b = arg;
	if (b->stopped) {
		return b->stopped;
	}
	if (b->data_only && !exists) {
		return 0;
	}
	b->ext[2 * b->n] = off;
	b->ext[2 * b->n + 1] = len;
	if (++b->n < SNAPMETA_BATCH) {
		return 0;
	}
	return snapmeta_flush(b);
}

// snapmeta_diff runs rbd_diff_iterate2 (parents included, exact extents) and delivers the
// last partial batch.
static int snapmeta_diff(rbd_image_t img, const char *from, uint64_t ofs, uint64_t len, snapmeta_batch *b) {
	int r = rbd_diff_iterate2(img, from, ofs, len, 1, 0, snapmeta_cb, b);
	if (r == 0 && b->n > 0) {
		r = snapmeta_flush(b);
	}
	return r;
}

// rbd_diff_iterate3 (Ceph 18.2.5+, 19.2.3+) takes the base snapshot by ID, so also one of the
// group snapshot namespace; fn is its address in the loaded librbd (package rbdcaps). Headers
// older than the call lack its flag: the value is librbd's.
#ifndef RBD_DIFF_ITERATE_FLAG_INCLUDE_PARENT
#define RBD_DIFF_ITERATE_FLAG_INCLUDE_PARENT (1U<<0)
#endif
typedef int (*snapmeta_diff3_fn)(rbd_image_t, uint64_t, uint64_t, uint64_t, uint32_t,
				 int (*)(uint64_t, size_t, int, void *), void *);

static int snapmeta_diff_by_id(void *fn, rbd_image_t img, uint64_t from, uint64_t ofs, uint64_t len, snapmeta_batch *b) {
	int r = ((snapmeta_diff3_fn)fn)(img, from, ofs, len, RBD_DIFF_ITERATE_FLAG_INCLUDE_PARENT, snapmeta_cb, b);
	if (r == 0 && b->n > 0) {
		r = snapmeta_flush(b);
	}
	return r;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"syscall"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
)

// rbdError is a librbd return code; ErrorCode lets ceph.Wrap classify it like go-ceph's errors.
type rbdError int

func (e rbdError) Error() string {
	return fmt.Sprintf("rbd: ret=%d, %v", int(e), syscall.Errno(-e))
}

func (e rbdError) ErrorCode() int { return int(e) }

func rbdErr(ret C.int) error {
	if ret >= 0 {
		return nil
	}
	return rbdError(ret)
}

// snapImage is an image opened read-only at a snapshot, through librbd's C API (go-ceph keeps
// its handle private, and the batched iteration needs it).
type snapImage struct {
	img  C.rbd_image_t
	name string // the image's name, for messages
	at   uint64 // the ID of the snapshot it is open at
}

func openSnapImage(io *rados.IOContext, name, snap string) (*snapImage, error) {
	cname, csnap := C.CString(name), C.CString(snap)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(csnap))
	var img C.rbd_image_t
	if err := rbdErr(C.rbd_open_read_only(C.rados_ioctx_t(io.Pointer()), cname, &img, csnap)); err != nil {
		return nil, err
	}
	return &snapImage{img: img, name: name}, nil
}

// openImageAt opens name read-only at the snapshot with ID snapID: the way to reach the
// snapshots of group snapshots, which have no name of the user namespace.
func openImageAt(io *rados.IOContext, name string, snapID uint64) (*snapImage, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var img C.rbd_image_t
	if err := rbdErr(C.rbd_open_read_only(C.rados_ioctx_t(io.Pointer()), cname, &img, nil)); err != nil {
		return nil, err
	}
	if err := rbdErr(C.rbd_snap_set_by_id(img, C.uint64_t(snapID))); err != nil {
		C.rbd_close(img)
		return nil, err
	}
	return &snapImage{img: img, name: name}, nil
}

func (s *snapImage) close() error { return rbdErr(C.rbd_close(s.img)) }

func (s *snapImage) size() (uint64, error) {
	var v C.uint64_t
	err := rbdErr(C.rbd_get_size(s.img, &v))
	return uint64(v), err
}

// metadata reads the image's metadata key; ok is false when it is not set. librbd's metadata
// is the image's, not the snapshot's: an image open at a snapshot reads today's value.
func (s *snapImage) metadata(key string) (v string, ok bool, err error) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	n := C.size_t(256) // ERANGE sets n to the room the value needs
	for range 3 {      // the value may grow between the two calls
		buf := (*C.char)(C.malloc(n))
		ret := C.rbd_metadata_get(s.img, ckey, buf, &n)
		if ret >= 0 {
			v = C.GoString(buf)
		}
		C.free(unsafe.Pointer(buf))
		switch {
		case ret >= 0:
			return v, true, nil
		case ret == -C.ENOENT:
			return "", false, nil
		case ret != -C.ERANGE:
			return "", false, rbdErr(ret)
		}
	}
	return "", false, rbdError(-C.ERANGE)
}

func (s *snapImage) stripeUnit() (uint64, error) {
	var v C.uint64_t
	err := rbdErr(C.rbd_get_stripe_unit(s.img, &v))
	return uint64(v), err
}

// snapID is the ID of the image's snapshot name; a missing one is ENOENT.
func (s *snapImage) snapID(name string) (uint64, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var v C.uint64_t
	err := rbdErr(C.rbd_snap_get_id(s.img, cname, &v))
	return uint64(v), err
}

// fromSnap is where a diff starts: the image's beginning (zero value), or a snapshot. A
// snapshot with an ID is diffed from by ID where librbd has rbd_diff_iterate3, else by name; a
// group snapshot's member has an ID only (the OSDs number snapshots from 1: 0 is no ID).
type fromSnap struct {
	name string
	id   uint64
}

// errNoDiffByID: the loaded librbd has no rbd_diff_iterate3.
var errNoDiffByID = errors.New("librbd lacks rbd_diff_iterate3")

// diff iterates the extents changed since snapshot from in [off, off+length), calling deliver
// with (offset, length) pairs in batches on librbd's thread. deliver returns 0 to go on or a
// negative errno to stop the iteration.
func (s *snapImage) diff(from fromSnap, off, length uint64, dataOnly bool, deliver func(pairs []uint64) int) error {
	var byID unsafe.Pointer
	if from.id != 0 {
		if byID = rbdcaps.Lookup(rbdcaps.DiffIterate3); byID == nil && from.name == "" {
			return errNoDiffByID
		}
	}
	var cfrom *C.char
	if from.name != "" {
		cfrom = C.CString(from.name)
		defer C.free(unsafe.Pointer(cfrom))
	}
	// C memory: librbd's thread writes it while Go code runs, and it holds no Go pointers
	b := (*C.snapmeta_batch)(C.calloc(1, C.sizeof_snapmeta_batch))
	if b == nil {
		return rbdError(-C.ENOMEM)
	}
	defer C.free(unsafe.Pointer(b))
	h := cgo.NewHandle(deliver)
	defer h.Delete()
	b.handle = C.uintptr_t(h)
	if dataOnly {
		b.data_only = 1
	}
	if byID != nil {
		return rbdErr(C.snapmeta_diff_by_id(byID, s.img, C.uint64_t(from.id), C.uint64_t(off), C.uint64_t(length), b))
	}
	return rbdErr(C.snapmeta_diff(s.img, cfrom, C.uint64_t(off), C.uint64_t(length), b))
}

//export snapmetaDeliver
func snapmetaDeliver(h C.uintptr_t, ext *C.uint64_t, n C.int) C.int {
	deliver := cgo.Handle(h).Value().(func([]uint64) int)
	return C.int(deliver(unsafe.Slice((*uint64)(unsafe.Pointer(ext)), 2*int(n))))
}
