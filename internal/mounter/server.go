package mounter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	cephfsmount "github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/endpoint"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// ServerOptions configure a holder.
type ServerOptions struct {
	// Endpoint is the socket, unix:///<state dir>/<driver>/mounter.sock.
	Endpoint string
	// Type is the driver type served, "rbd" or "cephfs"; RBD or CephFS does the work.
	Type   string
	RBD    *attach.Fuse
	CephFS *cephfsmount.Fuse
	// StateDir holds the work directories of the mounts (<state dir>/<driver name>): requests
	// naming another directory are refused, and Shutdown stops the ceph-fuse daemons of those.
	StateDir string
	// Binary is the holder's version, for the logs of its clients.
	Binary string
}

// Server is a running holder.
type Server struct {
	opts     ServerOptions
	path     string
	ln       *net.UnixListener
	socket   os.FileInfo // the socket file this server made, removed only if still there
	lock     *os.File
	instance string
	log      klog.Logger

	ctx      context.Context // ends when Shutdown gives up on requests in flight
	cancel   context.CancelFunc
	inflight sync.WaitGroup
	mu       sync.Mutex
	watchers map[*net.UnixConn]bool
}

// Listen takes the holder's lock (waiting, within ctx, for a predecessor to finish handing
// over: one holder per driver and node at a time) and listens on the endpoint.
func Listen(ctx context.Context, opts ServerOptions) (*Server, error) {
	if (opts.RBD == nil) == (opts.CephFS == nil) {
		return nil, errors.New("mount holder: exactly one of RBD and CephFS is served")
	}
	path, err := endpoint.SocketPath(opts.Endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	lock, err := takeLock(ctx, path+".lock")
	if err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			lock.Close()
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		_ = os.Remove(path) // a predecessor that died without removing it
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		lock.Close()
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		lock.Close()
		return nil, err
	}
	s := &Server{opts: opts, path: path, ln: ln, socket: fi, lock: lock, instance: newInstance(),
		watchers: map[*net.UnixConn]bool{}}
	s.log = klog.Background().WithValues("holder", s.instance)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// takeLock locks path (flock), waiting until its holder lets go or ctx ends.
func takeLock(ctx context.Context, path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for logged := false; ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !logged {
			klog.InfoS("Waiting for the previous mount holder to hand over", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another mount holder keeps %s: %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newInstance() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Path is the socket file.
func (s *Server) Path() string { return s.path }

// Instance identifies this run of the holder.
func (s *Server) Instance() string { return s.instance }

// Serve answers requests until Shutdown.
func (s *Server) Serve() error {
	s.log.Info("Mount holder serving", "socket", s.path, "type", s.opts.Type, "version", s.opts.Binary)
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		s.inflight.Add(1)
		go s.handle(c)
	}
}

// Shutdown stops accepting requests, gives those in flight up to grace, then hands over: the
// RBD image servers stop after answering their requests (the node plugin keeps their
// connections for the next holder) and ceph-fuse daemons are asked to exit, which unmounts
// them cleanly and closes their MDS sessions (they would be killed with this container
// anyway; the next holder mounts them again). Watchers see the connection close.
func (s *Server) Shutdown(grace time.Duration) {
	s.ln.Close()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.log.Info("Requests still in flight after the grace period; cancelling them", "grace", grace)
		s.cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if s.opts.RBD != nil {
		s.opts.RBD.Shutdown(ctx)
	}
	if s.opts.CephFS != nil {
		if err := hostexec.StopDaemonsUnder(ctx, "/proc", "ceph-fuse", "--admin_socket=", s.opts.StateDir, 0); err != nil {
			s.log.Error(err, "Stopping ceph-fuse daemons")
		}
	}
	s.cancel()
	s.mu.Lock()
	for c := range s.watchers {
		c.Close()
	}
	s.mu.Unlock()
	// the socket file may be a successor's already
	if fi, err := os.Lstat(s.path); err == nil && os.SameFile(fi, s.socket) {
		_ = os.Remove(s.path)
	}
	s.lock.Close()
	s.log.Info("Mount holder stopped")
}

// handle answers one connection's request. It counts as in flight (see Shutdown) unless it
// is a watch, which lasts as long as the holder.
func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	done := sync.OnceFunc(s.inflight.Done)
	defer done()
	if err := checkPeer(c); err != nil {
		s.log.Error(err, "Refusing a connection")
		return
	}
	var req request
	files, err := recv(c, &req)
	if err != nil {
		if !errors.Is(err, errClosed) {
			s.log.Error(err, "Reading a request")
		}
		return
	}
	defer closeAll(files)
	if req.Op == opWatch {
		done()
		s.watch(c)
		return
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = defaultOpTimeout
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	// a caller that goes away (gave up, or was killed) cancels its operation
	go func() {
		var buf [1]byte
		_, _ = c.Read(buf[:])
		cancel()
	}()
	log := s.log.WithValues("op", req.Op)
	ctx = klog.NewContext(ctx, log)
	var file *os.File
	if len(files) > 0 {
		file = files[0]
	}
	body, out, err := s.do(ctx, req, file)
	if out != nil {
		defer out.Close()
	}
	if err != nil {
		log.V(2).Info("Request failed", "err", err)
	}
	var rep reply
	rep.Err = encodeError(err)
	if err == nil && body != nil {
		if rep.Body, err = json.Marshal(body); err != nil {
			rep.Err = encodeError(err)
		}
	}
	var send1 []*os.File
	if out != nil && rep.Err == nil {
		send1 = append(send1, out)
	}
	if err := send(c, rep, send1...); err != nil {
		log.Error(err, "Answering a request")
	}
}

// do runs an operation; out is a descriptor to send back with the answer.
func (s *Server) do(ctx context.Context, req request, file *os.File) (body any, out *os.File, err error) {
	switch req.Op {
	case opHello:
		return s.hello(), nil, nil
	case opRBDAttach, opRBDDetach:
		if s.opts.RBD == nil {
			return nil, nil, fmt.Errorf("this holder serves %s volumes, not rbd", s.opts.Type)
		}
		if req.Op == opRBDAttach {
			return s.rbdAttach(ctx, req.Body, file)
		}
		return nil, nil, s.rbdDetach(ctx, req.Body, file)
	case opCephFSMount, opCephFSRelease, opCephFSRunning:
		if s.opts.CephFS == nil {
			return nil, nil, fmt.Errorf("this holder serves %s volumes, not cephfs", s.opts.Type)
		}
		return s.cephfs(ctx, req)
	}
	return nil, nil, fmt.Errorf("unknown operation %q (holder protocol version %d)", req.Op, Version)
}

func (s *Server) hello() hello {
	return hello{Version: Version, Instance: s.instance, Type: s.opts.Type, Binary: s.opts.Binary, PID: os.Getpid(), Features: features}
}

// watch answers with hello and keeps the connection open until the holder stops: the client
// learns of a restart by its closing.
func (s *Server) watch(c *net.UnixConn) {
	s.mu.Lock()
	s.watchers[c] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, c)
		s.mu.Unlock()
	}()
	body, _ := json.Marshal(s.hello())
	if err := send(c, reply{Body: body}, nil...); err != nil {
		return
	}
	var buf [1]byte
	_, _ = c.Read(buf[:]) // returns when either side closes
}

func (s *Server) rbdAttach(ctx context.Context, raw json.RawMessage, file *os.File) (any, *os.File, error) {
	var m rbdAttach
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, err
	}
	if err := s.checkWorkDir(m.WorkDir); err != nil {
		return nil, nil, err
	}
	if err := checkFuseFD(file); err != nil {
		return nil, nil, err
	}
	if file != nil && m.Resume != nil {
		if err := checkFuseConnection(file, fuseDirIn(m.WorkDir)); err != nil {
			return nil, nil, err
		}
	}
	cred, err := m.Cred.ceph()
	if err != nil {
		return nil, nil, err
	}
	req := attach.Request{Image: m.Image, MonHost: m.MonHost, Cred: cred, ReadOnly: m.ReadOnly, WorkDir: m.WorkDir, KeepOnly: m.KeepOnly,
		CrushLocation: m.CrushLocation, Encryption: m.Encryption}
	if file != nil && m.Resume != nil {
		req.Resume = &attach.Connection{File: file, State: *m.Resume}
	}
	a, err := s.opts.RBD.Attach(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	conn, err := s.opts.RBD.Connection(a.FuseDir)
	if err != nil {
		return nil, nil, err
	}
	return rbdAttached{Attachment: a, Encryption: conn.Encryption}, conn.File, nil
}

func (s *Server) rbdDetach(ctx context.Context, raw json.RawMessage, file *os.File) error {
	var m rbdDetach
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	if err := s.checkWorkDir(m.Attachment.WorkDir); err != nil {
		return err
	}
	if err := checkFuseFD(file); err != nil {
		return err
	}
	// the FUSE directory is the work directory's own, whatever the request says: detaching
	// unmounts and removes it
	m.Attachment = m.Attachment.InWorkDir(m.Attachment.WorkDir)
	if file != nil && m.Resume != nil {
		if err := checkFuseConnection(file, fuseDirIn(m.Attachment.WorkDir)); err != nil {
			return err
		}
	}
	var conn *attach.Connection
	if file != nil && m.Resume != nil {
		conn = &attach.Connection{File: file, State: *m.Resume}
	}
	return s.opts.RBD.DetachResuming(ctx, m.Attachment, conn)
}

func (s *Server) cephfs(ctx context.Context, req request) (any, *os.File, error) {
	switch req.Op {
	case opCephFSMount:
		var m cephfsMount
		if err := json.Unmarshal(req.Body, &m); err != nil {
			return nil, nil, err
		}
		if err := s.checkWorkDir(m.WorkDir); err != nil {
			return nil, nil, err
		}
		if err := checkNode(m.Node); err != nil {
			return nil, nil, err
		}
		if err := checkCephFSOptions(m.Options); err != nil {
			return nil, nil, err
		}
		if err := checkCephFSTarget(m.FSName, m.Path, m.Target); err != nil {
			return nil, nil, err
		}
		cred, err := m.Cred.ceph()
		if err != nil {
			return nil, nil, err
		}
		return nil, nil, s.opts.CephFS.Mount(ctx, cephfsmount.Request{Monitors: m.Monitors, FSName: m.FSName, Path: m.Path,
			Target: m.Target, ReadOnly: m.ReadOnly, Options: m.Options, Cred: cred, WorkDir: m.WorkDir, Node: m.Node})
	case opCephFSRelease:
		var w workDirBody
		if err := json.Unmarshal(req.Body, &w); err != nil {
			return nil, nil, err
		}
		if err := s.checkWorkDir(w.WorkDir); err != nil {
			return nil, nil, err
		}
		return nil, nil, s.opts.CephFS.Release(ctx, w.WorkDir)
	default:
		var w workDirBody
		if err := json.Unmarshal(req.Body, &w); err != nil {
			return nil, nil, err
		}
		if err := s.checkWorkDir(w.WorkDir); err != nil {
			return nil, nil, err
		}
		r, err := s.opts.CephFS.Running(ctx, w.WorkDir)
		return running{Running: r}, nil, err
	}
}

// fuseDirIn is the FUSE directory of an RBD attachment in workDir (attach.Attachment.InWorkDir
// derives it; any non-empty FuseDir is replaced).
func fuseDirIn(workDir string) string {
	return attach.Attachment{FuseDir: "-"}.InWorkDir(workDir).FuseDir
}

// nodePattern: a node ID goes into ceph-fuse's --client_metadata, a comma-separated list of
// key=value pairs, so it may not carry a separator (it would announce other keys).
var nodePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,252})?$`)

// checkNode refuses a node ID that is not a plain name (empty: an older node plugin's request).
func checkNode(node string) error {
	if node != "" && !nodePattern.MatchString(node) {
		return fmt.Errorf("%w: node ID %q: want up to 253 characters of [A-Za-z0-9._-]", ceph.ErrInvalid, node)
	}
	return nil
}

// checkPeer accepts only processes of this process's user (root on a node): the socket
// carries keys and hands out the connections of mounted volumes.
func checkPeer(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return cerr
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("peer process %d runs as user %d", cred.Pid, cred.Uid)
	}
	return nil
}
