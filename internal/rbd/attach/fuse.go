package attach

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephname"
	"github.com/monoceph/monoceph/internal/fusefile"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Fuse attaches an image as a file this process serves over FUSE (package fusefile, librbd
// through go-ceph) with a loop device on that file. It needs only FUSE and loop devices.
//
// It replaced rbd-fuse, which it resembles, for one reason: a loop device stays usable only
// as long as the FUSE connection under its file does, and rbd-fuse's connection dies with
// rbd-fuse. Here the process that keeps a duplicate of the connection's /dev/fuse descriptor
// (the node plugin, while this runs in the mount holder) keeps the connection, and a
// restarted server resumes it (Request.Resume): the loop device, the filesystem on it and the
// pods using it see their I/O wait, not fail.
//
// The file is the only one in the directory FuseDir (it cannot be removed, renamed or truncated
// through the mount; see imageFile for its name). Its size is the image's at every stat, so
// Refresh needs only `losetup --set-capacity` after a resize. The key never reaches a file or a
// command line: librados gets it in this process.
type Fuse struct {
	x    hostexec.Executor
	sys  string
	pool *ceph.Pool
	// ConnectTimeout bounds connecting to the cluster and opening the image.
	ConnectTimeout time.Duration
	// EncryptionTimeout is added for an encrypted image's key load (kms.WithKDFSlot)
	EncryptionTimeout time.Duration

	mu       sync.Mutex
	sessions map[string]*session  // by FUSE directory
	busy     map[string]chan bool // per FUSE directory: one operation at a time
	// replicaReads holds the clusters (by monitors) known to allow replica reads
	replicaReads map[string]bool
}

// NewFuse returns the FUSE + loop attacher; pool opens its Ceph connections.
func NewFuse(x hostexec.Executor, pool *ceph.Pool) *Fuse {
	return &Fuse{x: x, sys: SysRoot, pool: pool, ConnectTimeout: 30 * time.Second, EncryptionTimeout: 2 * time.Minute,
		sessions: map[string]*session{}, busy: map[string]chan bool{}, replicaReads: map[string]bool{}}
}

// Name implements Attacher.
func (*Fuse) Name() string { return volumecontext.MounterFuse }

// fuseDirName is the FUSE mount point inside an attachment's WorkDir.
const fuseDirName = "fuse"

// FuseSubtype names the FUSE mounts in the mount table: fuse.monoceph-rbd.
const FuseSubtype = "monoceph-rbd"

// Available implements Attacher.
func (f *Fuse) Available() error {
	if err := FuseAvailable(); err != nil {
		return err
	}
	if f.pool == nil {
		return &UnavailableError{Mounter: f.Name(), Missing: "no Ceph connection pool"}
	}
	return nil
}

// FuseAvailable reports what this node lacks for the fuse mounter (an *UnavailableError), or
// nil.
func FuseAvailable() error {
	for _, cmd := range []string{"losetup", "umount"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return &UnavailableError{Mounter: volumecontext.MounterFuse, Missing: "the " + cmd + " command is not installed"}
		}
	}
	if !exists("/dev/fuse") {
		return &UnavailableError{Mounter: volumecontext.MounterFuse, Missing: "/dev/fuse is missing (FUSE is not available)"}
	}
	if !exists("/dev/loop-control") {
		return &UnavailableError{Mounter: volumecontext.MounterFuse, Missing: "/dev/loop-control is missing (loop devices are not available)"}
	}
	return nil
}

func fuseDir(a Attachment) string {
	if a.FuseDir != "" {
		return a.FuseDir
	}
	return filepath.Join(a.WorkDir, fuseDirName)
}

// ImageFile is the file the image is shown as. Its name is the work directory's (a hash of the
// volume ID), unique among the node's volumes, and its parent's (the node state directory's)
// inode number, unique among nodes that share one kernel's loop devices (the end-to-end test's
// nodes on one machine; their paths are alike): a loop device whose mount namespace is gone
// names its file by that name alone, which is how Detach and a restarted holder find it
// without asking the file's FUSE server (a stat of a file nobody serves waits). The image name
// comes from a volume context or a staging record and reaches librbd only: one that is not a
// strict Ceph name is refused before anything is looked at.
func ImageFile(a Attachment) (string, error) {
	if err := cephname.Check(a.Image.Name); err != nil {
		return "", fmt.Errorf("image name %q is not a plain Ceph name", a.Image.Name)
	}
	name := fileName(a)
	if err := cephname.Check(name); err != nil {
		return "", fmt.Errorf("work directory %q does not name a volume", a.WorkDir)
	}
	return filepath.Join(fuseDir(a), name), nil
}

func fileName(a Attachment) string { return FuseFileName(a.WorkDir) }

// FuseFileName is the name of the image file in the FUSE directory of work directory workDir
// (see ImageFile).
func FuseFileName(workDir string) string {
	name := "vol-" + filepath.Base(workDir)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Dir(workDir), &st); err == nil {
		name += "-" + strconv.FormatUint(st.Ino, 36)
	}
	return name
}

// lock serialises the operations on one FUSE directory (the holder may be asked by an old
// and a new node plugin at once); it fails when ctx ends first.
func (f *Fuse) lock(ctx context.Context, dir string) (func(), error) {
	for {
		f.mu.Lock()
		ch, held := f.busy[dir]
		if !held {
			ch = make(chan bool)
			f.busy[dir] = ch
			f.mu.Unlock()
			return func() {
				f.mu.Lock()
				delete(f.busy, dir)
				f.mu.Unlock()
				close(ch)
			}, nil
		}
		f.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("another operation on %s is in progress: %w", dir, ctx.Err())
		}
	}
}

// Attach implements Attacher: it serves the image at FuseDir (a mount there that nobody
// serves is resumed through req.Resume, or, when its connection is gone, replaced) and puts
// a loop device on it, or finds the one there.
func (f *Fuse) Attach(ctx context.Context, req Request) (Attachment, error) {
	a := Attachment{Image: req.Image, ReadOnly: req.ReadOnly, WorkDir: req.WorkDir}
	a.FuseDir = fuseDir(a)
	file, err := ImageFile(a)
	if err != nil {
		return a, err
	}
	if err := f.Available(); err != nil {
		return a, err
	}
	if err := os.Mkdir(a.FuseDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return a, err
	}
	unlock, err := f.lock(ctx, a.FuseDir)
	if err != nil {
		return a, err
	}
	defer unlock()
	s, err := f.serve(ctx, req, a)
	if err != nil {
		return a, err
	}
	st := s.srv.State()
	a.Session = &st
	if a.Device, err = f.ensureLoop(ctx, a, file); err != nil {
		return a, err
	}
	return a, nil
}

// serve returns the session serving a's directory, starting one when there is none.
func (f *Fuse) serve(ctx context.Context, req Request, a Attachment) (*session, error) {
	dir := a.FuseDir
	m, err := hostmount.MountAt(dir)
	if err != nil {
		return nil, err
	}
	if s := f.session(dir); s != nil {
		if !s.ended() && m != nil {
			if s.image != req.Image || s.readOnly != req.ReadOnly {
				return nil, fmt.Errorf("%s serves image %s (read-only %v), not %s (read-only %v)", dir, s.image.Spec(), s.readOnly, req.Image.Spec(), req.ReadOnly)
			}
			return s, nil
		}
		// unmounted behind our back, or its connection ended
		f.end(ctx, s)
	}
	if m != nil && !isFuseFile(m.FsType) {
		return nil, fmt.Errorf("%s holds a %s mount, not this driver's", dir, m.FsType)
	}
	if m != nil && req.Resume != nil {
		return f.start(ctx, req, a, req.Resume)
	}
	if req.KeepOnly {
		return nil, fmt.Errorf("%w: %s is not served and no connection of it is kept", ErrConnectionLost, dir)
	}
	if m != nil {
		if err := f.clearDead(ctx, a); err != nil {
			return nil, err
		}
	}
	return f.start(ctx, req, a, nil)
}

// clearDead removes a mount at a's directory whose connection is gone (its server died and
// nobody kept the connection), with the loop devices on it. A mount that still answers, or that
// does not answer at all (its connection is kept open by a process that did not hand it over),
// is left alone: that is an error.
func (f *Fuse) clearDead(ctx context.Context, a Attachment) error {
	dir := a.FuseDir
	file, _ := ImageFile(a)
	waitCtx, cancel := context.WithTimeout(ctx, f.ConnectTimeout)
	_, err := hostmount.StatWithin(waitCtx, file)
	cancel()
	switch {
	case err == nil:
		return fmt.Errorf("%s is served by another process", dir)
	case hostmount.Unresponsive(err) || ctx.Err() != nil:
		return fmt.Errorf("nothing serves the FUSE mount at %s but its connection is still open (the node plugin keeps it, and resumes it through its next request): %w", dir, err)
	}
	klog.FromContext(ctx).Info("FUSE mount of an image is dead, mounting it again", "dir", dir, "err", err)
	// a loop device on a dead connection reads nothing any more; one still open (a filesystem
	// mounted on it) is only marked to detach itself when released
	if err := f.detachLoops(ctx, a, false); err != nil {
		return err
	}
	return f.unmount(ctx, dir, true)
}

// ensureLoop returns the loop device on the image file, setting one up when there is none.
func (f *Fuse) ensureLoop(ctx context.Context, a Attachment, file string) (string, error) {
	loops, err := f.loopsOf(a)
	if err != nil {
		return "", err
	}
	if loops, err = f.current(ctx, a, loops); err != nil {
		return "", err
	}
	for _, dev := range loops {
		if loopReadOnly(f.sys, dev) == a.ReadOnly {
			// a device of an earlier version, or one the kernel refused direct I/O: it works
			// either way, direct I/O only makes it faster
			if err := loopEnableDirectIO(ctx, f.x, f.sys, dev); err != nil {
				klog.FromContext(ctx).Info("Loop device stays without direct I/O", "device", dev, "err", err)
			}
			return dev, nil
		}
	}
	return loopSetup(ctx, f.x, file, a.ReadOnly)
}

// loopsOf lists the loop devices on a's image file, current or on an earlier, dead
// connection of the same directory: those whose backing file has the file's name (see
// imageFile). Nothing is asked of a FUSE server.
func (f *Fuse) loopsOf(a Attachment) ([]string, error) {
	return loopsNamed(f.sys, fileName(a))
}

// current returns those of loops that read the file of the mount at a's directory now (its
// device and inode), not a dead earlier one. Asked only while this process serves the file.
func (f *Fuse) current(ctx context.Context, a Attachment, loops []string) ([]string, error) {
	m, err := hostmount.MountAt(a.FuseDir)
	if err != nil || m == nil {
		return nil, err
	}
	var cur []string
	for _, dev := range loops {
		if reads, err := loopReadsInode(ctx, dev, uint32(m.Major), uint32(m.Minor), fusefile.FileInode); err == nil && reads {
			cur = append(cur, dev)
		}
	}
	return cur, nil
}

// detachLoops detaches the loop devices on a's image file, current and earlier ones. With
// strict, a device that stays bound after the detach (open: a filesystem on it is still
// mounted somewhere) is an error; the caller must not unmount under it.
func (f *Fuse) detachLoops(ctx context.Context, a Attachment, strict bool) error {
	loops, err := f.loopsOf(a)
	if err != nil {
		return err
	}
	for _, dev := range loops {
		if err := loopDetach(ctx, f.x, f.sys, dev); err != nil {
			return err
		}
	}
	if !strict {
		return nil
	}
	// A device bound after the detach is still open, and detaches itself once closed. The
	// close often comes a moment later: the last reference to the filesystem on it may be a
	// copy of its mount in another mount namespace (a pod's container, any process that
	// unshared its mounts while the volume was mounted; the host's / is often private, so
	// unmounts do not reach those copies), and a namespace whose last process just exited
	// drops its mounts in the background. So wait a little before calling it held.
	deadline := time.Now().Add(busyWait)
	for {
		left, err := f.loopsOf(a)
		if err != nil || len(left) == 0 {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("loop devices %v of image %s are still open (a filesystem on them is mounted, maybe in another mount namespace); they detach themselves once closed", left, a.Image.Spec())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unmount unmounts the FUSE mount at dir; with dead (nothing serves it any more), lazily when a
// normal unmount is refused: nothing can be read or written through it any more. A loop device
// just detached lets go of the file a moment later (the kernel runs its teardown in the
// background), so a live mount refused as busy is tried again for a while.
func (f *Fuse) unmount(ctx context.Context, dir string, dead bool) error {
	deadline := time.Now().Add(busyWait)
	for {
		m, err := hostmount.MountAt(dir)
		if err != nil || m == nil {
			return err
		}
		err = unix.Unmount(dir, 0)
		if err == nil {
			continue // stacked mounts: look again
		}
		if dead || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) || ctx.Err() != nil {
			if dead {
				return ignoreInvalid(unix.Unmount(dir, unix.MNT_DETACH))
			}
			return &os.PathError{Op: "unmount", Path: dir, Err: err}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// busyWait bounds the retries of an unmount refused as busy.
const busyWait = 5 * time.Second

func ignoreInvalid(err error) error {
	if errors.Is(err, unix.EINVAL) {
		return nil // not mounted (any more)
	}
	return err
}

// Detach implements Attacher: the loop devices go first (while the file is served: detaching
// flushes it), then the mount, then the session, closing the image (so its watch and exclusive
// lock are gone when Detach returns). A mount nobody serves is detached through conn when one
// is given (see DetachResuming), else only when its connection is gone.
func (f *Fuse) Detach(ctx context.Context, a Attachment) error {
	return f.DetachResuming(ctx, a, nil)
}

// DetachResuming is Detach of an attachment whose connection nobody serves but conn keeps
// open (the holder restarted and the volume is unstaged before it was resumed): the
// connection is resumed only to answer the loop device's last requests. Nothing is written
// through it any more (the filesystem on the device was unmounted), so it answers without the
// image: reads and writes fail, flushes too.
func (f *Fuse) DetachResuming(ctx context.Context, a Attachment, conn *Connection) error {
	dir := fuseDir(a)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("attachment %+v names no FUSE directory", a)
	}
	if _, err := ImageFile(a); err != nil {
		return err
	}
	a.FuseDir = dir
	unlock, err := f.lock(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	m, err := hostmount.MountAt(dir)
	if err != nil {
		return err
	}
	s := f.session(dir)
	if s != nil && s.ended() {
		f.end(ctx, s)
		s = nil
	}
	if m != nil && s == nil && conn != nil {
		if s, err = f.resume(dir, a, conn, offline{}); err != nil {
			return err
		}
	}
	if m != nil && s == nil {
		if err := f.clearDead(ctx, a); err != nil {
			return err
		}
	}
	if err := f.detachLoops(ctx, a, true); err != nil {
		return err
	}
	if err := f.unmount(ctx, dir, s == nil); err != nil {
		return err
	}
	if s != nil {
		f.end(ctx, s)
	}
	if err := ignoreNotExist(os.Remove(dir)); err != nil {
		return err
	}
	// key files and configuration rbd-fuse, which this attacher replaced, left in the work dir
	return removeCredentialFiles(a.WorkDir)
}

// Refresh implements Attacher.
func (f *Fuse) Refresh(ctx context.Context, a Attachment, minBytes int64) (int64, error) {
	file, err := ImageFile(a)
	if err != nil {
		return 0, err
	}
	var size int64
	for {
		fi, err := hostmount.StatWithin(ctx, file)
		if err != nil {
			if ctx.Err() != nil && size > 0 {
				return size, fmt.Errorf("image %s is %d bytes, want at least %d: %w", a.Image.Spec(), size, minBytes, ctx.Err())
			}
			return size, fmt.Errorf("FUSE file of %s: %w", a.Image.Spec(), err)
		}
		if size = fi.Size(); size >= minBytes {
			break
		}
		// the controller grew the image; librbd here learns it from a watch notification
		select {
		case <-ctx.Done():
			return size, fmt.Errorf("image %s is %d bytes, want at least %d: %w", a.Image.Spec(), size, minBytes, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if _, err := f.x.Run(ctx, "losetup", "--set-capacity", a.Device); err != nil {
		return 0, err
	}
	return DeviceSize(a.Device)
}

// Check implements Attacher.
func (f *Fuse) Check(ctx context.Context, a Attachment) error {
	file, err := ImageFile(a)
	if err != nil {
		return unhealthy("Unknown", "%w", err)
	}
	dir := fuseDir(a)
	m, err := hostmount.MountAt(dir)
	if err != nil {
		return unhealthy("Unknown", "reading the mount table: %w", err)
	}
	if m == nil {
		return unhealthy("NotMounted", "the image file of %s is not mounted at %s", a.Image.Spec(), dir)
	}
	if _, err := hostmount.StatWithin(ctx, file); err != nil {
		switch {
		case errors.Is(err, syscall.ENOTCONN), errors.Is(err, syscall.ECONNABORTED):
			return unhealthy("DaemonGone", "the FUSE connection of image %s is gone: %w", a.Image.Spec(), err)
		case hostmount.Unresponsive(err):
			return unhealthy("Unresponsive", "the FUSE server of image %s does not answer: %w", a.Image.Spec(), err)
		}
		return unhealthy("Unknown", "FUSE file of image %s: %w", a.Image.Spec(), err)
	}
	if err := loopReads(ctx, a.Device, file); err != nil {
		if hostmount.Unresponsive(err) {
			return unhealthy("Unresponsive", "the FUSE server of image %s does not answer: %w", a.Image.Spec(), err)
		}
		return unhealthy("DeviceGone", "loop device %s: %w", a.Device, err)
	}
	return nil
}

// isFuseFile reports whether a mount table file system type is this attacher's.
func isFuseFile(fsType string) bool {
	return fsType == "fuse."+FuseSubtype || slices.Contains([]string{"fuse", "fuse.rbd-fuse"}, fsType)
}
