package attach

/*
#cgo LDFLAGS: -lrbd
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <rbd/librbd.h>

// One read in flight. Its buffer is C memory: librbd writes into it after rbd_aio_read has
// returned, which Go memory must not be used for.
typedef struct {
	int fd;      // the completion pipe's write end
	uint32_t n;  // this slot's number, what the pipe carries
	rbd_completion_t c;
	char *buf;
} monoceph_aio;

// monoceph_aio_done runs on librbd's thread: it only names the slot on the pipe, which Go's
// poller watches (no call into Go from a foreign thread). It reads a->fd and a->n: the pipe's
// write end and the slots' memory must outlive every completion (see aioReader.close). A 4-byte write to a pipe is atomic
// and never blocks: the pipe holds 64 KiB, the slots in flight need 4 bytes each.
static void monoceph_aio_done(rbd_completion_t c, void *arg) {
	monoceph_aio *a = arg;
	ssize_t r;
	do {
		r = write(a->fd, &a->n, sizeof a->n);
	} while (r < 0 && errno == EINTR);
}

static int monoceph_aio_read(rbd_image_t img, monoceph_aio *a, uint64_t off, size_t len) {
	a->buf = malloc(len > 0 ? len : 1);
	if (a->buf == NULL) {
		return -ENOMEM;
	}
	int r = rbd_aio_create_completion(a, monoceph_aio_done, &a->c);
	if (r == 0) {
		r = rbd_aio_read(img, off, len, a->buf, a->c);
		if (r < 0) {
			rbd_aio_release(a->c);
		}
	}
	if (r < 0) {
		free(a->buf);
		a->buf = NULL;
	}
	return r;
}

static ssize_t monoceph_aio_finish(monoceph_aio *a) {
	ssize_t r = rbd_aio_get_return_value(a->c);
	rbd_aio_release(a->c);
	return r;
}

static void monoceph_aio_free(monoceph_aio *a) {
	free(a->buf);
	a->buf = NULL;
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/fusefile"
	"golang.org/x/sys/unix"
)

// aioSlots bounds the reads in flight on one image: the FUSE server's own bound, and a few
// more, since a read's slot comes back only after its answer gave the server's request slot
// back, which lets the server start the next read first. A read that finds no free slot is
// read synchronously.
const aioSlots = fusefile.MaxInflight + 4

// errNoSlot: every slot is taken.
var errNoSlot = errors.New("no free read slot")

// aioReader reads an image with librbd's aio (rbd_aio_read), which go-ceph does not offer:
// a read then holds no OS thread while it waits for the OSD, and its completion wakes one
// goroutine through a pipe. Measured with BenchmarkDataPath (e2e/restart) on this 2-core
// machine, against ReadAt (rbd_read, one blocked thread per read): see README, RBD data path.
type aioReader struct {
	img   C.rbd_image_t
	r     *os.File // the pipe's read end, polled by the Go runtime
	w     int      // its write end, written by librbd's completion thread
	slots []C.monoceph_aio
	cmem  unsafe.Pointer // slots' memory (C: librbd keeps pointers to it)

	mu      sync.Mutex
	back    sync.Cond // on mu: signalled when a slot comes back to free
	free    []uint32
	pending [aioSlots]func([]byte, error)
	stopped chan struct{} // closed when the completion goroutine ended
}

// imageHandle is img's librbd handle, which go-ceph keeps in an unexported field: read by
// reflection so that aio needs no second handle of the image (two handles of one image would
// pass its exclusive lock back and forth). A go-ceph that renames the field makes this fail
// (TestImageHandleField) and reads fall back to ReadAt.
func imageHandle(img *rbd.Image) (C.rbd_image_t, error) {
	f := reflect.ValueOf(img).Elem().FieldByName("image")
	if !f.IsValid() || f.Kind() != reflect.UnsafePointer {
		return nil, errors.New("go-ceph's rbd.Image has no unsafe.Pointer field named image")
	}
	h := *(*unsafe.Pointer)(unsafe.Pointer(f.UnsafeAddr()))
	if h == nil {
		return nil, errors.New("image not open")
	}
	return C.rbd_image_t(h), nil
}

func newAIOReader(img *rbd.Image) (*aioReader, error) {
	h, err := imageHandle(img)
	if err != nil {
		return nil, err
	}
	return newAIO(h)
}

// newAIO is an aioReader of librbd handle h.
func newAIO(h C.rbd_image_t) (*aioReader, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("completion pipe: %w", err)
	}
	// only the read end is non-blocking, so that Go's poller watches it
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, fmt.Errorf("completion pipe: %w", err)
	}
	a := &aioReader{img: h, r: os.NewFile(uintptr(p[0]), "rbd-aio"), w: p[1], stopped: make(chan struct{})}
	a.back.L = &a.mu
	a.cmem = C.calloc(aioSlots, C.size_t(unsafe.Sizeof(C.monoceph_aio{})))
	if a.cmem == nil {
		a.r.Close()
		unix.Close(a.w)
		return nil, errors.New("read slots: out of memory")
	}
	a.slots = unsafe.Slice((*C.monoceph_aio)(a.cmem), aioSlots)
	for i := range a.slots {
		a.slots[i].fd = C.int(a.w)
		a.slots[i].n = C.uint32_t(i)
		a.free = append(a.free, uint32(i))
	}
	go a.complete()
	return a, nil
}

// start reads size bytes at off into a slot; done gets them when librbd completes the read.
func (a *aioReader) start(off int64, size int, done func([]byte, error)) error {
	a.mu.Lock()
	if len(a.free) == 0 {
		a.mu.Unlock()
		return errNoSlot
	}
	n := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	a.pending[n] = done
	a.mu.Unlock()
	if r := C.monoceph_aio_read(a.img, &a.slots[n], C.uint64_t(off), C.size_t(size)); r < 0 {
		a.put(n)
		return syscall.Errno(-r)
	}
	return nil
}

func (a *aioReader) put(n uint32) {
	a.mu.Lock()
	a.pending[n] = nil
	a.free = append(a.free, n)
	a.back.Broadcast()
	a.mu.Unlock()
}

// complete answers reads as librbd names them on the pipe, until the write end is closed.
func (a *aioReader) complete() {
	defer close(a.stopped)
	buf := make([]byte, 4*aioSlots) // whole entries: every write is 4 bytes, atomically
	for {
		k, err := a.r.Read(buf)
		for i := 0; i+4 <= k; i += 4 {
			a.finish(binary.NativeEndian.Uint32(buf[i:]))
		}
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return // io.EOF once close closed the write end
		}
	}
}

func (a *aioReader) finish(n uint32) {
	if n >= aioSlots {
		return
	}
	slot := &a.slots[n]
	ret := C.monoceph_aio_finish(slot)
	a.mu.Lock()
	done := a.pending[n]
	a.mu.Unlock()
	if ret < 0 {
		done(nil, syscall.Errno(-ret))
	} else {
		done(unsafe.Slice((*byte)(unsafe.Pointer(slot.buf)), int(ret)), nil)
	}
	C.monoceph_aio_free(slot)
	a.put(n)
}

// drainTimeout bounds close's wait for the completions of reads still in flight.
var drainTimeout = 2 * time.Minute

// close ends the completion goroutine and frees the slots once every read started has been
// answered, after the image is closed. rbd_close does not wait for that: librbd dispatches
// completion callbacks on its own strand, so monoceph_aio_done may still be queued when
// rbd_close returns, and will then read its slot and write to the pipe. So close waits for
// every slot to come back (bounded by drainTimeout) before it closes the write end and frees
// the slots' memory. Reads that never come back leave both in place (leaked, said in the
// error): a callback writing to a freed slot or a reused descriptor would be worse.
func (a *aioReader) close() error {
	if out := a.drain(drainTimeout); out > 0 {
		return fmt.Errorf("%d reads still in flight after %s: their completion pipe and slots are left allocated", out, drainTimeout)
	}
	unix.Close(a.w)
	<-a.stopped
	a.r.Close()
	C.free(a.cmem)
	a.cmem = nil
	return nil
}

// drain waits up to timeout for every slot to be free; it returns how many are still out.
func (a *aioReader) drain(timeout time.Duration) int {
	expired := false
	t := time.AfterFunc(timeout, func() {
		a.mu.Lock()
		expired = true
		a.back.Broadcast()
		a.mu.Unlock()
	})
	defer t.Stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.free) < aioSlots && !expired {
		a.back.Wait()
	}
	return aioSlots - len(a.free)
}
