package fusefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Backend is the content of the file.
type Backend interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Flush makes the writes before it durable (fsync of the file, a flush of the loop device).
	Flush() error
	// Size is the file's size, asked at every stat: a backend that grows shows it at once.
	Size() (int64, error)
}

// AsyncReader is a Backend that starts a read and returns at once, answering it from a
// completion later (librbd's aio): no thread waits out each read. Reads through a Backend
// without it block one OS thread each in ReadAt for the round trip to the OSDs; at 4 KiB QD 32
// that cost 8 context switches and 214 µs of the server's CPU per read on this 2-core machine
// (fio's rbd engine, which waits on completions, needs 72 µs), and reads ran at 0.40x of it.
type AsyncReader interface {
	// ReadAsync starts reading size bytes at off. Unless it returns an error, done is called
	// exactly once (possibly before ReadAsync returns) with the bytes read, valid only during
	// the call (fewer than size at the end of the file), or why the read failed. It must
	// not wait for the read: the server calls it from the loop that reads requests.
	ReadAsync(off int64, size int, done func(p []byte, err error)) error
}

// Discarder is a Backend that can deallocate a range, which reads as zeros afterwards
// (fallocate PUNCH_HOLE: discards of a loop device on the file).
type Discarder interface {
	Discard(off, length int64) error
}

// Options describe the file system.
type Options struct {
	// Name is the file's name in the root directory: a plain name.
	Name string
	// ReadOnly mounts read-only and refuses writes.
	ReadOnly bool
	// Subtype names the file system in the mount table: fuse.<Subtype>.
	Subtype string
	// Log receives what goes wrong while serving (requests failing, a dropped reply).
	Log klog.Logger
}

// State is what a later Server needs to resume a connection.
type State struct {
	// Minor is the protocol minor version INIT negotiated: it fixes the layout of requests.
	Minor uint32 `json:"minor"`
}

// ErrUnmounted ends a Server whose connection is gone: the file system was unmounted or the
// connection aborted.
var ErrUnmounted = errors.New("the FUSE connection is gone")

// MaxInflight bounds the requests a Server serves at once, reads an AsyncReader has started
// included.
const MaxInflight = 64

// Limits offered at INIT.
const (
	// ourMinor is the highest protocol minor this server speaks: 7.31 (Linux 5.9) fixed the
	// layouts used here; nothing later is needed.
	ourMinor = 31
	// minMinor: FUSE_MAX_PAGES (7.28) lets a request carry 1 MiB.
	minMinor = 28
	maxWrite = 1 << 20
	// inflightMax bounds the requests served at once (goroutines in librbd).
	inflightMax = MaxInflight
	// bufSize holds the largest request: a write of maxWrite and its header.
	bufSize = maxWrite + 4096
	// initTimeout bounds the wait for the kernel's INIT after the mount.
	initTimeout = 10 * time.Second
)

// Server serves one FUSE connection until it is unmounted or Stop is called.
type Server struct {
	f     *os.File // the /dev/fuse descriptor: non-blocking, so reads can be cut short
	opts  Options
	b     Backend
	async AsyncReader // b's, when it has it
	state State
	log   klog.Logger

	bufs     sync.Pool // request buffers
	data     sync.Pool // read payloads, maxWrite each
	sem      chan struct{}
	inflight sync.WaitGroup
	done     chan struct{}
	err      error // why the loop ended, once done is closed
}

func newServer(fd int, opts Options, b Backend) (*Server, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("/dev/fuse: %w", err)
	}
	if opts.Log.GetSink() == nil {
		opts.Log = klog.Background()
	}
	s := &Server{
		// a non-blocking descriptor goes to Go's poller, so SetReadDeadline interrupts a read
		f:    os.NewFile(uintptr(fd), "/dev/fuse"),
		opts: opts, b: b, log: opts.Log,
		sem:  make(chan struct{}, inflightMax),
		done: make(chan struct{}),
	}
	s.async, _ = b.(AsyncReader)
	s.bufs.New = func() any { b := make([]byte, bufSize); return &b }
	s.data.New = func() any { b := make([]byte, maxWrite); return &b }
	return s, nil
}

// State returns what a successor needs to resume the connection.
func (s *Server) State() State { return s.state }

// Dup returns a new descriptor of the connection, for a process that keeps it open while no
// server runs. Closing it never ends the connection while another descriptor is open.
func (s *Server) Dup() (*os.File, error) {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var derr error
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(nfd), "/dev/fuse"), nil
}

// Done is closed when the server stopped; Err then says why.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is nil after Stop, ErrUnmounted when the connection went away, else what broke the
// loop. Only valid once Done is closed.
func (s *Server) Err() error { return s.err }

// Stop stops reading requests, waits (up to timeout) for those being served to be answered
// and closes this server's descriptor. The connection itself stays open as long as another
// process holds a descriptor of it: requests arriving meanwhile wait in the kernel for the
// next server. Without one, closing the last descriptor aborts the connection.
func (s *Server) Stop(timeout time.Duration) error {
	_ = s.f.SetReadDeadline(time.Now())
	select {
	case <-s.done:
	case <-time.After(timeout):
		return fmt.Errorf("requests still being served after %s", timeout)
	}
	return s.f.Close()
}

func (s *Server) loop() {
	defer close(s.done)
	defer s.inflight.Wait()
	for {
		bp := s.bufs.Get().(*[]byte)
		n, err := s.f.Read(*bp)
		if err != nil {
			s.bufs.Put(bp)
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				return // Stop
			case errors.Is(err, syscall.ENODEV):
				s.err = ErrUnmounted
				return
			case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ENOENT):
				// ENOENT: the request was interrupted before we read it
				continue
			case errors.Is(err, fs.ErrClosed):
				s.err = ErrUnmounted
				return
			}
			s.err = fmt.Errorf("reading /dev/fuse: %w", err)
			return
		}
		req := (*bp)[:n]
		if len(req) < int(unsafe.Sizeof(fuse.InHeader{})) {
			s.bufs.Put(bp)
			continue
		}
		s.sem <- struct{}{}
		s.inflight.Add(1)
		// once: a backend that both calls a read's done and returns an error (against
		// AsyncReader's contract) must not free the request's slot twice: a second receive
		// from sem would stop the loop, a second Done would panic
		var once sync.Once
		release := func() { once.Do(func() { <-s.sem; s.bufs.Put(bp); s.inflight.Done() }) }
		if h, _ := as[fuse.InHeader](req); h.Opcode == opRead && s.async != nil {
			// the request keeps its place in sem until the read's completion answers it:
			// inflightMax bounds reads in librbd as it bounds requests served by goroutines.
			// Started here, not on a goroutine of its own: starting a read only queues it
			s.readAsync(h, req, release)
			continue
		}
		go func() {
			defer release()
			s.serve(req)
		}()
	}
}

// reply answers request unique with errno (0: success) and the payload.
func (s *Server) reply(unique uint64, errno syscall.Errno, payload ...[]byte) {
	size := int(unsafe.Sizeof(fuse.OutHeader{}))
	if errno == 0 {
		for _, p := range payload {
			size += len(p)
		}
	} else {
		payload = nil
	}
	h := fuse.OutHeader{Length: uint32(size), Status: -int32(errno), Unique: unique}
	iov := make([][]byte, 0, 1+len(payload))
	iov = append(iov, bytesOf(&h))
	if err := s.writev(append(iov, payload...)); err != nil && !errors.Is(err, syscall.ENOENT) {
		// ENOENT: the request was interrupted or the connection aborted meanwhile
		s.log.Error(err, "Answering a FUSE request", "unique", unique)
	}
}

// writev writes one answer from its pieces in one system call, as /dev/fuse requires, without
// copying them together first (a read's payload is up to 1 MiB).
func (s *Server) writev(iov [][]byte) error {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		_, werr = unix.Writev(int(fd), iov)
		return !errors.Is(werr, syscall.EAGAIN)
	}); err != nil {
		return err
	}
	return werr
}

// notifyResend asks the kernel to send again the requests an earlier server read and did not
// answer (FUSE_NOTIFY_RESEND, Linux 6.9).
func (s *Server) notifyResend() error {
	h := fuse.OutHeader{Length: uint32(unsafe.Sizeof(fuse.OutHeader{})), Status: -fuse.NOTIFY_RESEND}
	_, err := s.f.Write(bytesOf(&h))
	return err
}

// bytesOf is the memory of a protocol structure, which has the kernel's layout.
func bytesOf[T any](v *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v))
}

// as reads a protocol structure at the start of a request, or reports that the request is
// too short for it.
func as[T any](req []byte) (*T, bool) {
	var zero T
	if len(req) < int(unsafe.Sizeof(zero)) {
		return nil, false
	}
	return (*T)(unsafe.Pointer(&req[0])), true
}
