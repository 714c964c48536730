package fusefile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Mount mounts a new FUSE file system at dir showing b as the file opts.Name, answers the
// kernel's INIT and serves it in the background.
func Mount(dir string, opts Options, b Backend) (*Server, error) {
	if opts.Name == "" || strings.ContainsAny(opts.Name, "/\x00") || opts.Name == "." || opts.Name == ".." {
		return nil, fmt.Errorf("file name %q is not a plain name", opts.Name)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if opts.ReadOnly {
		flags |= unix.MS_RDONLY
	}
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d", fd, unix.S_IFDIR, os.Getuid(), os.Getgid())
	fstype := "fuse"
	if opts.Subtype != "" {
		fstype += "." + opts.Subtype
	}
	if err := unix.Mount("monoceph", dir, fstype, flags, data); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mount %s at %s: %w", fstype, dir, err)
	}
	// only now: the descriptor is polled for requests once it belongs to a connection (polling
	// a fresh /dev/fuse descriptor registers no wake-up, and reads would wait forever)
	s, err := newServer(fd, opts, b)
	if err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return nil, err
	}
	if err := s.handshake(); err != nil {
		// nothing answers this mount: detach it, then close the descriptor, which aborts it
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		s.f.Close()
		return nil, err
	}
	go s.loop()
	return s, nil
}

// Resume serves the connection of f, a /dev/fuse descriptor whose INIT an earlier server
// answered with state. f stays the caller's: Resume works on a duplicate. Requests the earlier
// server read but did not answer are asked back from the kernel; on kernels without
// FUSE_NOTIFY_RESEND (before 6.9) they stay unanswered, so an earlier server must Stop, not
// die, for nothing to hang.
func Resume(f *os.File, state State, opts Options, b Backend) (*Server, error) {
	if state.Minor < minMinor {
		return nil, fmt.Errorf("protocol minor version %d: want at least %d", state.Minor, minMinor)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := rc.Control(func(ofd uintptr) { fd, derr = unix.FcntlInt(ofd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("duplicating the /dev/fuse descriptor: %w", derr)
	}
	s, err := newServer(fd, opts, b)
	if err != nil {
		return nil, err
	}
	s.state = state
	if err := s.notifyResend(); err != nil {
		s.log.Info("The kernel cannot resend requests an earlier server left unanswered (FUSE_NOTIFY_RESEND needs Linux 6.9)", "err", err)
	}
	go s.loop()
	return s, nil
}

// handshake answers the kernel's INIT, the first request of a new connection.
func (s *Server) handshake() error {
	if err := s.f.SetReadDeadline(time.Now().Add(initTimeout)); err != nil {
		return err
	}
	defer s.f.SetReadDeadline(time.Time{})
	buf := make([]byte, bufSize)
	for {
		n, err := s.f.Read(buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("waiting for the kernel's INIT: %w", err)
		}
		req := buf[:n]
		h, ok := as[fuse.InHeader](req)
		if !ok || h.Opcode != opInit {
			return fmt.Errorf("first FUSE request has opcode %d, want INIT", h.Opcode)
		}
		return s.init(h, req)
	}
}

// init negotiates: the kernel's minor version up to ourMinor, 1 MiB requests.
func (s *Server) init(h *fuse.InHeader, req []byte) error {
	// fuse_init_in grew over time: major, minor, max_readahead and flags are always there
	type initIn struct {
		fuse.InHeader
		Major, Minor, MaxReadAhead, Flags uint32
	}
	in, ok := as[initIn](req)
	if !ok {
		s.reply(h.Unique, syscall.EPROTO)
		return errors.New("INIT request too short")
	}
	if in.Major != 7 || in.Minor < minMinor {
		s.reply(h.Unique, syscall.EPROTO)
		return fmt.Errorf("kernel FUSE protocol %d.%d: want 7.%d or later", in.Major, in.Minor, minMinor)
	}
	s.state = State{Minor: min(in.Minor, ourMinor)}
	want := uint32(fuse.CAP_ASYNC_READ | fuse.CAP_BIG_WRITES | fuse.CAP_MAX_PAGES | fuse.CAP_ASYNC_DIO)
	out := fuse.InitOut{
		Major: 7, Minor: s.state.Minor,
		MaxReadAhead:        in.MaxReadAhead,
		Flags:               in.Flags & want,
		MaxBackground:       inflightMax,
		CongestionThreshold: inflightMax * 3 / 4,
		MaxWrite:            maxWrite,
		TimeGran:            1,
		MaxPages:            maxWrite / 4096,
	}
	s.reply(h.Unique, 0, bytesOf(&out))
	return nil
}
