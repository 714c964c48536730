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
	"sync"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/cephname"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/rbd/imagefs"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"k8s.io/klog/v2"
)

// Fuse attaches images with rbd-fuse, which shows an image as a file in a FUSE mount, and a
// loop device on that file.
//
// Observed with rbd-fuse 16.2 (Pacific), and relied on here:
//   - it parses Ceph's own options (-c, -m, --id, --keyfile, --client_mount_timeout) before
//     its own, which take "--poolname=P" (the form with a blank is taken as the mount point)
//     and "--namespace=N" (its short form -s clashes with FUSE's -s); see poolArgs for the
//     releases that crash on those two;
//   - it authenticates (fetching the monitors' config) before it forks, so a wrong key fails
//     the command itself; but it opens its cluster connection, reading the key file again,
//     only when the kernel first talks to the mount, after the command returned. Attach waits
//     for that with a stat of the image file before it removes the key file;
//   - a missing image is a missing file (ENOENT); a missing pool makes the daemon exit, after
//     which the mount answers ENOTCONN;
//   - getattr asks librbd for the size each time, so with attr_timeout=0 a grown image shows
//     its new size at once and `losetup --set-capacity` passes it on: no remount is needed to
//     expand;
//   - unlink on the mount removes the image: nothing here ever deletes files in it, and the
//     mount point is removed with os.Remove only, never recursively.
//
// Where the node's rbd-fuse cannot serve an image (it crashes when given a pool or namespace,
// see poolArgs) or is not installed, `Server rbd-fuse` does, with the same arguments: monoceph's
// own FUSE server (package imagefs), which behaves as described above.
type Fuse struct {
	x   hostexec.Executor
	sys string
	// ConnectTimeout bounds rbd-fuse's connection to the cluster.
	ConnectTimeout time.Duration
	// Server is the monoceph executable whose `rbd-fuse` subcommand serves images the node's
	// rbd-fuse cannot; empty: none.
	Server string

	probe struct {
		sync.Mutex
		done, takesPools bool
	}
}

// NewFuse returns the rbd-fuse + loop attacher; server is Fuse.Server.
func NewFuse(x hostexec.Executor, server string) *Fuse {
	return &Fuse{x: x, sys: SysRoot, ConnectTimeout: 30 * time.Second, Server: server}
}

// Name implements Attacher.
func (*Fuse) Name() string { return volumecontext.MounterFuse }

// fuseDirName is the rbd-fuse mount point inside an attachment's WorkDir.
const fuseDirName = "rbd-fuse"

// Available implements Attacher.
func (f *Fuse) Available() error {
	for _, cmd := range []string{"losetup", "umount"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return &UnavailableError{Mounter: f.Name(), Missing: "the " + cmd + " command is not installed"}
		}
	}
	if _, err := exec.LookPath("rbd-fuse"); err != nil && f.Server == "" {
		return &UnavailableError{Mounter: f.Name(), Missing: "the rbd-fuse command is not installed"}
	}
	if !exists("/dev/fuse") {
		return &UnavailableError{Mounter: f.Name(), Missing: "/dev/fuse is missing (FUSE is not available)"}
	}
	if !exists("/dev/loop-control") {
		return &UnavailableError{Mounter: f.Name(), Missing: "/dev/loop-control is missing (loop devices are not available)"}
	}
	return nil
}

func fuseDir(a Attachment) string {
	if a.FuseDir != "" {
		return a.FuseDir
	}
	return filepath.Join(a.WorkDir, fuseDirName)
}

// imageFile is the file rbd-fuse shows the image as. The image name comes from a volume
// context or a staging record: one that is not a plain file name directly in the mount point
// ("..", a path) is refused, so nothing here ever stats, attaches or detaches a file elsewhere.
func imageFile(a Attachment) (string, error) {
	dir := fuseDir(a)
	file := filepath.Join(dir, a.Image.Name)
	if err := cephname.Check(a.Image.Name); err != nil || filepath.Dir(file) != dir {
		return "", fmt.Errorf("image name %q does not name a file in the rbd-fuse mount point %s", a.Image.Name, dir)
	}
	return file, nil
}

// Attach implements Attacher.
func (f *Fuse) Attach(ctx context.Context, req Request) (Attachment, error) {
	a := Attachment{Image: req.Image, ReadOnly: req.ReadOnly, WorkDir: req.WorkDir}
	a.FuseDir = fuseDir(a)
	file, err := imageFile(a)
	if err != nil {
		return a, err
	}
	if err := f.Available(); err != nil {
		return a, err
	}
	if err := os.Mkdir(a.FuseDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return a, err
	}
	up, err := f.fuseUp(ctx, a, file)
	if err != nil {
		return a, err
	}
	if !up {
		if err := f.mount(ctx, req, a, file); err != nil {
			return a, err
		}
	}
	loops, err := loopsBackedBy(f.sys, file)
	if err != nil {
		return a, err
	}
	for _, dev := range loops {
		if loopReadOnly(f.sys, dev) == a.ReadOnly && loopReads(ctx, dev, file) == nil {
			a.Device = dev
			return a, nil
		}
	}
	if a.Device, err = loopSetup(ctx, f.x, file, a.ReadOnly); err != nil {
		return a, err
	}
	return a, nil
}

// fuseUp reports whether rbd-fuse is mounted and serving the image. A mount whose daemon died
// is unmounted, so the caller mounts afresh.
func (f *Fuse) fuseUp(ctx context.Context, a Attachment, file string) (bool, error) {
	dir := fuseDir(a)
	m, err := hostmount.MountAt(dir)
	if err != nil || m == nil {
		return false, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, f.ConnectTimeout)
	_, err = hostmount.StatWithin(waitCtx, file)
	cancel()
	if err == nil {
		return true, nil
	}
	if hostmount.Unresponsive(err) || ctx.Err() != nil {
		// a daemon that does not answer in time may be busy rather than dead: do not remount
		// under it
		return false, err
	}
	klog.FromContext(ctx).Info("rbd-fuse mount does not serve the image, remounting", "dir", dir, "err", err)
	// Detach the loop devices on the dead mount first, while their backing file still has a
	// name to find them by: the unmount below may have to be lazy, after which they would name
	// a path outside any mount and leak. One still in use (a filesystem mounted on it) is only
	// marked by the kernel to detach itself when released.
	loops, err := loopsBackedBy(f.sys, file)
	if err != nil {
		return false, err
	}
	for _, dev := range loops {
		if err := loopDetach(ctx, f.x, f.sys, dev); err != nil {
			return false, err
		}
	}
	return false, f.unmount(ctx, dir)
}

func (f *Fuse) mount(ctx context.Context, req Request, a Attachment, file string) error {
	args, removeKey, err := credentialArgs(req.WorkDir, req.MonHost, req.Cred, f.ConnectTimeout)
	if err != nil {
		return err
	}
	defer removeKey()
	// no admin socket or log file: a second daemon of the same Ceph user would fail to bind the
	// same socket path, and nothing would rotate the logs
	args = append(args, "--admin_socket=", "--log_file=")
	pool := poolArgs(req.Image)
	args = append(args, pool...)
	// attr_timeout=0: see the type comment (sizes); entry/negative: an image created or
	// removed meanwhile is seen at once
	opts := "attr_timeout=0,entry_timeout=0,negative_timeout=0"
	if req.ReadOnly {
		opts += ",ro"
	}
	args = append(args, "-r", req.Image.Name, "-o", opts, a.FuseDir)
	prog := "rbd-fuse"
	if !f.rbdFuseServes(ctx, len(pool) > 0) {
		prog, args = f.Server, append([]string{"rbd-fuse"}, args...)
	}
	if _, err := f.x.Run(ctx, prog, args...); err != nil {
		var ce *hostexec.CommandError
		switch {
		case prog == f.Server && errors.As(err, &ce) && ce.ExitCode == imagefs.ExitNotFound:
			return fmt.Errorf("%w: %s", ErrImageNotFound, err)
		case prog == "rbd-fuse" && len(pool) > 0 && crashed(err):
			return fmt.Errorf("%w (rbd-fuse 18.2 and 20.2 as Debian 13 and forky ship them crash when given a pool or namespace; "+
				"only images of pool %s outside namespaces work with it there, and monoceph serves others itself only where it knows its executable)",
				err, defaultFusePool)
		}
		return err
	}
	// bounded: the daemon's connection gives up after ConnectTimeout, but opening the image
	// then waits on OSDs with no timeout of its own
	waitCtx, cancel := context.WithTimeout(ctx, 2*f.ConnectTimeout)
	_, err = hostmount.StatWithin(waitCtx, file)
	cancel()
	if err == nil {
		return nil
	}
	// leave nothing mounted behind a failed attach
	if uerr := f.unmount(context.WithoutCancel(ctx), a.FuseDir); uerr != nil {
		klog.FromContext(ctx).Error(uerr, "Unmounting a failed rbd-fuse mount", "dir", a.FuseDir)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: rbd-fuse does not see image %s", ErrImageNotFound, req.Image.Spec())
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("rbd-fuse for %s exited after mounting (missing pool or namespace, or the cluster refused the connection): %w", req.Image.Spec(), err)
	}
	return fmt.Errorf("rbd-fuse for %s does not answer: %w", req.Image.Spec(), err)
}

// defaultFusePool is the pool rbd-fuse serves when not told another.
const defaultFusePool = "rbd"

// poolArgs names the image's pool and namespace to rbd-fuse, leaving out its defaults (pool
// rbd, no namespace). rbd-fuse 18.2.7 (Debian 13) and 20.2.4 (Debian forky) die of SIGSEGV in
// fuse_opt_parse whenever --poolname or --namespace is given, whatever the value (16.2 on
// Debian 12 does not): there, this mounter works for images of pool rbd outside namespaces.
func poolArgs(img Image) []string {
	var args []string
	if img.Pool != defaultFusePool {
		args = append(args, "--poolname="+img.Pool)
	}
	if img.Namespace != "" {
		args = append(args, "--namespace="+img.Namespace)
	}
	return args
}

// crashed reports whether err is a command killed by a signal of its own making (SIGSEGV,
// SIGABRT, SIGBUS).
func crashed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && slices.Contains([]syscall.Signal{syscall.SIGSEGV, syscall.SIGABRT, syscall.SIGBUS}, ws.Signal())
}

// rbdFuseServes reports whether the node's rbd-fuse serves an image (named with a pool or
// namespace argument when namesPool): it must be installed, and take those arguments without
// crashing. Without a Server there is nothing else to use, so the answer is then yes.
func (f *Fuse) rbdFuseServes(ctx context.Context, namesPool bool) bool {
	if f.Server == "" {
		return true
	}
	if _, err := exec.LookPath("rbd-fuse"); err != nil {
		return false
	}
	return !namesPool || f.rbdFuseTakesPools(ctx)
}

// rbdFuseTakesPools asks rbd-fuse, once per process, whether it survives --poolname and
// --namespace. It parses its options before it touches the cluster or the mount point, so
// with a mount point that does not exist a good one fails at once and a bad one crashes first.
func (f *Fuse) rbdFuseTakesPools(ctx context.Context) bool {
	f.probe.Lock()
	defer f.probe.Unlock()
	if !f.probe.done {
		missing := filepath.Join(os.TempDir(), fmt.Sprintf("monoceph-rbd-fuse-probe-%d-missing", os.Getpid()))
		_, err := f.x.Run(ctx, "rbd-fuse", "-c", os.DevNull, "--no-mon-config", "--poolname=probe", "--namespace=probe",
			"-r", "probe", missing)
		if ctx.Err() != nil {
			return false // undecided: ask again next time, use monoceph's server now
		}
		f.probe.done, f.probe.takesPools = true, !crashed(err)
		klog.FromContext(ctx).Info("Probed rbd-fuse", "takesPoolArguments", f.probe.takesPools, "err", err)
	}
	return f.probe.takesPools
}

// unmount unmounts a FUSE mount point. A mount whose daemon is gone and that a stale loop
// device still holds cannot be unmounted normally; it is detached lazily, which is safe since
// nothing can be read or written through it any more.
func (f *Fuse) unmount(ctx context.Context, dir string) error {
	m, err := hostmount.MountAt(dir)
	if err != nil || m == nil {
		return err
	}
	_, err = f.x.Run(ctx, "umount", dir)
	if err == nil {
		return nil
	}
	if _, serr := hostmount.StatWithin(ctx, dir); !errors.Is(serr, syscall.ENOTCONN) {
		return err
	}
	_, err = f.x.Run(ctx, "umount", "--lazy", dir)
	return err
}

// Detach implements Attacher.
func (f *Fuse) Detach(ctx context.Context, a Attachment) error {
	dir := fuseDir(a)
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("attachment %+v names no rbd-fuse directory", a)
	}
	file, err := imageFile(a)
	if err != nil {
		return err
	}
	// every loop device on the image file, not only the recorded one: Attach may have stopped
	// between losetup and the caller saving its answer, or left one on a dead mount
	loops, err := loopsBackedBy(f.sys, file)
	if err != nil {
		return err
	}
	if a.Device != "" && loopBacking(f.sys, a.Device) == file && !slices.Contains(loops, a.Device) {
		loops = append(loops, a.Device)
	}
	for _, dev := range loops {
		if err := loopDetach(ctx, f.x, f.sys, dev); err != nil {
			return err
		}
	}
	waitLoopsReleased(ctx, f.sys, file)
	if err := f.unmount(ctx, dir); err != nil {
		return err
	}
	// the daemon closes the image (dropping its watch) only as it exits after the unmount;
	// answering before that makes the image look in use to the DeleteVolume or attach that
	// follows an unstage
	for _, daemon := range []string{"rbd-fuse", imagefs.DaemonName} {
		if err := hostexec.StopDaemons(ctx, "/proc", daemon, dir, 10*time.Second); err != nil {
			return err
		}
	}
	if err := ignoreNotExist(os.Remove(dir)); err != nil {
		return err
	}
	return removeCredentialFiles(a.WorkDir)
}

// Refresh implements Attacher.
func (f *Fuse) Refresh(ctx context.Context, a Attachment, minBytes int64) (int64, error) {
	file, err := imageFile(a)
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
			return size, fmt.Errorf("rbd-fuse for %s: %w", a.Image.Spec(), err)
		}
		if size = fi.Size(); size >= minBytes {
			break
		}
		// the controller grew the image, but librbd in the daemon learns it from a watch
		// notification: give it a moment
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
	file, err := imageFile(a)
	if err != nil {
		return unhealthy("Unknown", "%w", err)
	}
	dir := fuseDir(a)
	m, err := hostmount.MountAt(dir)
	if err != nil {
		return unhealthy("Unknown", "reading the mount table: %w", err)
	}
	if m == nil {
		return unhealthy("NotMounted", "rbd-fuse is not mounted at %s", dir)
	}
	if _, err := hostmount.StatWithin(ctx, file); err != nil {
		switch {
		case errors.Is(err, syscall.ENOTCONN):
			return unhealthy("DaemonGone", "the rbd-fuse daemon of image %s is gone: %w", a.Image.Spec(), err)
		case hostmount.Unresponsive(err):
			return unhealthy("Unresponsive", "the rbd-fuse daemon of image %s does not answer: %w", a.Image.Spec(), err)
		}
		return unhealthy("Unknown", "rbd-fuse for image %s: %w", a.Image.Spec(), err)
	}
	if err := loopReads(ctx, a.Device, file); err != nil {
		if hostmount.Unresponsive(err) {
			return unhealthy("Unresponsive", "the rbd-fuse daemon of image %s does not answer: %w", a.Image.Spec(), err)
		}
		return unhealthy("DeviceGone", "loop device %s: %w", a.Device, err)
	}
	return nil
}
