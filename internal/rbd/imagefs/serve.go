package imagefs

import (
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Config is one image to serve.
type Config struct {
	// ConfFile, when set, is read first (an empty file keeps /etc/ceph/ceph.conf out).
	ConfFile string
	MonHost  string
	ID       string
	// KeyFile holds the key; it is read while connecting, and may go once Open returned.
	KeyFile        string
	ConnectTimeout time.Duration
	Pool           string
	Namespace      string
	Image          string
	ReadOnly       bool
}

// Session is an open image on its own cluster connection.
type Session struct {
	cfg  Config
	conn *rados.Conn
	io   *rados.IOContext
	img  *rbd.Image
}

// Open connects to the cluster and opens the image (read-only, without taking the exclusive
// lock, when cfg.ReadOnly). A missing pool or image is an error wrapping ENOENT.
func Open(cfg Config) (*Session, error) {
	conn, err := rados.NewConnWithUser(cfg.ID)
	if err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, conn: conn}
	if cfg.ConfFile != "" {
		if err := conn.ReadConfigFile(cfg.ConfFile); err != nil {
			return nil, fmt.Errorf("read %s: %w", cfg.ConfFile, err)
		}
	}
	timeout := strconv.Itoa(max(1, int(cfg.ConnectTimeout.Round(time.Second)/time.Second)))
	for _, o := range [][2]string{
		{"mon_host", cfg.MonHost},
		{"keyfile", cfg.KeyFile},
		{"client_mount_timeout", timeout},
		// no admin socket or log file: a second daemon of the same Ceph user would fail to
		// bind the socket path, and nothing would rotate the logs
		{"admin_socket", ""},
		{"log_file", ""},
		// discards of partial objects zero them, so that a punched hole reads back as zeros
		{"rbd_skip_partial_discard", "false"},
	} {
		if err := conn.SetConfigOption(o[0], o[1]); err != nil {
			conn.Shutdown()
			return nil, fmt.Errorf("set %s: %w", o[0], err)
		}
	}
	if err := conn.Connect(); err != nil {
		conn.Shutdown()
		return nil, fmt.Errorf("connect to %s as %s: %w", cfg.MonHost, cfg.ID, err)
	}
	if s.io, err = conn.OpenIOContext(cfg.Pool); err != nil {
		s.Close()
		return nil, fmt.Errorf("pool %s: %w", cfg.Pool, err)
	}
	s.io.SetNamespace(cfg.Namespace)
	if cfg.ReadOnly {
		s.img, err = rbd.OpenImageReadOnly(s.io, cfg.Image, rbd.NoSnapshot)
	} else {
		s.img, err = rbd.OpenImage(s.io, cfg.Image, rbd.NoSnapshot)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("image %s: %w", s.Spec(), err)
	}
	return s, nil
}

// Spec is pool/[namespace/]image.
func (s *Session) Spec() string {
	if s.cfg.Namespace == "" {
		return s.cfg.Pool + "/" + s.cfg.Image
	}
	return s.cfg.Pool + "/" + s.cfg.Namespace + "/" + s.cfg.Image
}

// Mount shows the image as the file <dir>/<image name> and serves it until the mount goes
// (umount, or Unmount of the returned server: then Wait returns). The kernel caches neither
// attributes nor lookups, and the mount is mounted by this process itself (root), read-only
// when the session is.
func (s *Session) Mount(dir string) (*fuse.Server, error) {
	zero := time.Duration(0)
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
	if s.cfg.ReadOnly {
		flags |= syscall.MS_RDONLY
	}
	return fs.Mount(dir, NewRoot(s.cfg.Image, s.img, s.cfg.ReadOnly), &fs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			FsName:            "rbd:" + s.Spec(),
			Name:              "monoceph-rbd",
			MaxWrite:          1 << 20,
			DirectMountStrict: true,
			DirectMountFlags:  flags,
			DisableXAttrs:     true,
		},
	})
}

// Close closes the image (dropping its watch and exclusive lock) and the connection.
func (s *Session) Close() {
	if s.img != nil {
		_ = s.img.Close()
	}
	if s.io != nil {
		s.io.Destroy()
	}
	s.conn.Shutdown()
}
