package attach

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/fusefile"
	"github.com/monoceph/monoceph/internal/hostexec"
)

// Attacher makes RBD images local block devices one way (krbd, rbd-nbd, FUSE + loop).
type Attacher interface {
	// Name is the mounter name volumes ask for (volumecontext.Mounter*).
	Name() string
	// Available reports why this node cannot attach images this way (an *UnavailableError),
	// or nil. It is cheap, so callers check on every use: a module may be loaded later.
	Available() error
	// Attach makes the image a block device. It is idempotent: an image already attached
	// through req.WorkDir is returned as it is.
	Attach(ctx context.Context, req Request) (Attachment, error)
	// Detach undoes Attach. Whatever is already gone is skipped, so it also cleans up after
	// an Attach that stopped half way.
	Detach(ctx context.Context, a Attachment) error
	// Refresh makes the device show the image's current size after the image grew and returns
	// that size. With minBytes > 0 it waits (within ctx) for the device to reach it.
	Refresh(ctx context.Context, a Attachment, minBytes int64) (int64, error)
	// Check reports why an attachment no longer works (its daemon died, its device vanished)
	// as an *Unhealthy, or nil.
	Check(ctx context.Context, a Attachment) error
}

// Image names an RBD image.
type Image struct {
	Pool      string
	Namespace string
	Name      string
}

// Spec is the image in the form the rbd tool takes: pool/[namespace/]image.
func (i Image) Spec() string {
	if i.Namespace == "" {
		return i.Pool + "/" + i.Name
	}
	return i.Pool + "/" + i.Namespace + "/" + i.Name
}

// Request is what Attach needs.
type Request struct {
	Image   Image
	MonHost string // the monitors, in mon_host form
	Cred    ceph.Credentials
	// ReadOnly attaches a device that rejects writes.
	ReadOnly bool
	// WorkDir is a private (0700) per-volume directory the attacher may use for key files and
	// mount points; it exists when Attach is called.
	WorkDir string
	// Resume is the kept connection of an image file nobody serves any more (fuse only; see
	// Fuse): Attach serves it again instead of replacing it. It never leaves the process.
	Resume *Connection `json:"-"`
	// KeepOnly attaches nothing new: it confirms (or resumes through Resume) an attachment
	// that lives on, and fails with ErrConnectionLost where that is gone (fuse only).
	KeepOnly bool `json:"-"`
	// CrushLocation is the node's CRUSH location (librados' form, "zone=z1 host=n1") when the
	// cluster map asks for read affinity: the FUSE server then reads from the nearest replica
	// where the cluster allows it (fuse only; see Fuse.open).
	CrushLocation string `json:"crushLocation,omitempty"`
	// Encryption opens an encrypted image (fuse only); nil for a plain one. It is key
	// material, never persisted: a resumed connection gets it from whoever kept the connection
	// (Connection.Encryption).
	Encryption *Encryption `json:"-"`
}

// Attachment is what Detach, Refresh and Check need; callers persist it (it is JSON friendly).
type Attachment struct {
	Image    Image  `json:"image"`
	Device   string `json:"device,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	WorkDir  string `json:"workDir,omitempty"`
	// FuseDir is where the image file is mounted (fuse only).
	FuseDir string `json:"fuseDir,omitempty"`
	// Session is what resuming the FUSE connection needs (fuse only).
	Session *fusefile.State `json:"session,omitempty"`
}

// InWorkDir returns a with its work directory set to dir, and the FUSE mount point, when
// it has one, the one in dir. Callers that persist attachments derive the directory themselves
// instead of trusting what they read back.
func (a Attachment) InWorkDir(dir string) Attachment {
	a.WorkDir = dir
	if a.FuseDir != "" {
		a.FuseDir = filepath.Join(dir, fuseDirName)
	}
	return a
}

// UnavailableError says which mounter a node cannot provide and what it lacks.
type UnavailableError struct {
	Mounter string
	Missing string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("mounter %q is not available on this node: %s", e.Mounter, e.Missing)
}

// Unhealthy says why an attachment no longer works.
type Unhealthy struct {
	// Reason is a CamelCase word for machines: NotMounted, DaemonGone, DeviceGone,
	// Unresponsive (a daemon that is alive but does not answer), Unknown.
	Reason string
	Err    error
}

func (u *Unhealthy) Error() string { return u.Err.Error() }
func (u *Unhealthy) Unwrap() error { return u.Err }

func unhealthy(reason string, format string, args ...any) error {
	return &Unhealthy{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ErrImageNotFound marks an image (or its pool or namespace) that does not exist.
var ErrImageNotFound = errors.New("image not found")

// ErrConnectionLost: the FUSE connection of an image file ended, and with it the loop device on
// it; only a new attachment (a new stage of the volume) helps.
var ErrConnectionLost = errors.New("the FUSE connection of the image file is gone")

// Set returns every attacher this package has, keyed by name, running commands through x;
// connectTimeout bounds the Ceph tools' connection to the cluster, pool opens the connections
// of the images the fuse attacher serves.
func Set(x hostexec.Executor, connectTimeout time.Duration, pool *ceph.Pool) map[string]Attacher {
	krbd, nbd, fuse := NewKRBD(x), NewNBD(x), NewFuse(x, pool)
	krbd.ConnectTimeout, nbd.ConnectTimeout, fuse.ConnectTimeout = connectTimeout, connectTimeout, connectTimeout
	all := []Attacher{krbd, nbd, fuse}
	m := make(map[string]Attacher, len(all))
	for _, a := range all {
		m[a.Name()] = a
	}
	return m
}
