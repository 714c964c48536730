package attach

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/rbd/imagefs"
)

// hostRecorder runs commands on the host and keeps their command lines.
type hostRecorder struct {
	x     hostexec.Executor
	mu    sync.Mutex
	calls [][]string
}

func (r *hostRecorder) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	r.calls = append(r.calls, append([]string{name}, args...))
	r.mu.Unlock()
	return r.x.Run(ctx, name, args...)
}

// TestFuseAttach attaches a real image with rbd-fuse: the command line is the one the Fuse
// comment documents, the key file is gone when Attach returns, Attach is idempotent, Refresh
// follows a resize without a remount, and Detach leaves nothing behind. An image in a RADOS
// namespace is served by rbd-fuse where it takes pool arguments (Pacific), else by monoceph's
// own server with the same arguments (Debian 13's Reef and forky's Tentacle rbd-fuse crash).
func TestFuseAttach(t *testing.T) {
	t.Run("pool rbd", func(t *testing.T) { testFuseAttach(t, "") })
	t.Run("namespace", func(t *testing.T) { testFuseAttach(t, fmt.Sprintf("attach-test-%d", time.Now().UnixNano()%1e9)) })
}

// fuseImage makes a 32 MiB image in pool rbd's namespace ns ("": the default one) for a test,
// removed when it ends; onImage runs fn with an IOContext of that namespace.
func fuseImage(t *testing.T, ns string) (cl cephtest.Cluster, name string, onImage func(fn func(*rados.IOContext) error) error) {
	cl = cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	conn, err := p.Get(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	onImage = func(fn func(*rados.IOContext) error) error {
		_, err := ceph.Call(context.Background(), conn, "librbd", func(c *rados.Conn) (struct{}, error) {
			io, err := c.OpenIOContext(cl.RBDPool)
			if err != nil {
				return struct{}{}, err
			}
			defer io.Destroy()
			io.SetNamespace(ns)
			return struct{}{}, fn(io)
		})
		return err
	}
	if ns != "" {
		if err := onImage(func(io *rados.IOContext) error { io.SetNamespace(""); return rbd.NamespaceCreate(io, ns) }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := onImage(func(io *rados.IOContext) error { io.SetNamespace(""); return rbd.NamespaceRemove(io, ns) }); err != nil {
				t.Errorf("namespace %s: %v", ns, err)
			}
		})
	}
	name = fmt.Sprintf("attach-test-%d", time.Now().UnixNano())
	if err := onImage(func(io *rados.IOContext) error {
		o := rbd.NewRbdImageOptions()
		defer o.Destroy()
		return rbd.CreateImage(io, name, 32<<20, o)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) { // a killed daemon's watch lasts 30 s
			err := onImage(func(io *rados.IOContext) error { return rbd.RemoveImage(io, name) })
			if err == nil || time.Now().After(deadline) {
				return
			}
		}
	})
	return cl, name, onImage
}

func testFuseAttach(t *testing.T, ns string) {
	cl, name, onImage := fuseImage(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rec := &hostRecorder{x: hostexec.New(time.Minute)}
	f := NewFuse(rec, cephtest.FuseServer())
	f.ConnectTimeout = 20 * time.Second
	work := t.TempDir()
	req := Request{Image: Image{Pool: cl.RBDPool, Namespace: ns, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work}
	prog := []string{"rbd-fuse"}
	if len(poolArgs(req.Image)) > 0 && !f.rbdFuseTakesPools(ctx) {
		if f.Server == "" {
			t.Fatal("this rbd-fuse crashes when given a pool or namespace, and MONOCEPH_BIN names no monoceph to serve instead")
		}
		prog = []string{f.Server, "rbd-fuse"}
	}
	rec.calls = nil // the probe
	// registered after TempDir, so it runs before the directory is removed
	t.Cleanup(func() { _ = f.Detach(context.Background(), Attachment{Image: req.Image, WorkDir: work}) })

	a, err := f.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fuse := filepath.Join(work, "rbd-fuse")
	if a.FuseDir != fuse || !strings.HasPrefix(a.Device, "/dev/loop") {
		t.Fatalf("attachment = %+v", a)
	}
	got := rec.calls[0]
	kf := argAfter(got, "--keyfile")
	want := append(slices.Clone(prog), "-c", filepath.Join(work, "ceph.conf"), "-m", cl.Monitors, "--id", cl.Admin.ID, "--keyfile", kf,
		"--client_mount_timeout=20", "--admin_socket=", "--log_file=")
	want = append(want, poolArgs(req.Image)...) // rbd-fuse's defaults are not named
	want = append(want, "-r", name, "-o", "attr_timeout=0,entry_timeout=0,negative_timeout=0", fuse)
	if !slices.Equal(got, want) {
		t.Fatalf("rbd-fuse command line\n got %q\nwant %q", got, want)
	}
	if !slices.Equal(rec.calls[1], []string{"losetup", "--find", "--show", filepath.Join(fuse, name)}) {
		t.Fatalf("second command %q", rec.calls[1])
	}
	if _, err := os.Stat(kf); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("key file still there after Attach: %v", err)
	}
	for _, c := range rec.calls {
		if strings.Contains(strings.Join(c, " "), cl.Admin.Key()) {
			t.Fatalf("key on a command line: %q", c[0])
		}
	}
	if err := f.Check(ctx, a); err != nil {
		t.Fatalf("Check: %v", err)
	}

	n := len(rec.calls)
	if a2, err := f.Attach(ctx, req); err != nil || a2 != a || len(rec.calls) != n {
		t.Fatalf("second Attach = %+v, %v, ran %q; want the same attachment and no command", a2, err, rec.calls[n:])
	}

	if err := onImage(func(io *rados.IOContext) error {
		img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer img.Close()
		return img.Resize(48 << 20)
	}); err != nil {
		t.Fatal(err)
	}
	if size, err := f.Refresh(ctx, a, 48<<20); err != nil || size != 48<<20 {
		t.Fatalf("Refresh = %d, %v; want %d", size, err, 48<<20)
	}

	for i := range 2 {
		if err := f.Detach(ctx, a); err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			continue
		}
		// released as Detach returns: a DeleteVolume or an attach elsewhere right after an
		// unstage must not find the image in use
		for _, daemon := range []string{"rbd-fuse", imagefs.DaemonName} {
			if pids, err := hostexec.Daemons("/proc", daemon, fuse); err != nil || len(pids) != 0 {
				t.Fatalf("%s %v (%v) still running after Detach", daemon, pids, err)
			}
		}
		var watchers int
		if err := onImage(func(io *rados.IOContext) error {
			img, err := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
			if err != nil {
				return err
			}
			defer img.Close()
			w, err := img.ListWatchers()
			watchers = len(w)
			return err
		}); err != nil || watchers != 0 {
			t.Fatalf("after Detach the image has %d watchers (%v), want 0", watchers, err)
		}
	}
	if m, _ := hostmount.MountAt(fuse); m != nil || exists(fuse) || loopBacking(SysRoot, a.Device) == filepath.Join(fuse, name) {
		t.Fatalf("left behind: mount %v, dir %v, loop %s", m, exists(fuse), loopBacking(SysRoot, a.Device))
	}
	if entries, _ := os.ReadDir(work); len(entries) != 0 {
		t.Fatalf("work directory holds %v", entries)
	}
	var u *Unhealthy
	if err := f.Check(ctx, a); !errors.As(err, &u) || u.Reason != "NotMounted" {
		t.Fatalf("Check after Detach = %v, want NotMounted", err)
	}
}

// TestFuseDetachWhileLoopHeld: a process still holding the loop device open when Detach runs
// (as udev does, probing it after the change event) keeps the device, and with it the image
// file, until it lets go; Detach waits for that instead of failing to unmount "target is busy"
// (seen in the suites under load before it waited).
func TestFuseDetachWhileLoopHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, a, _ := attachedImage(ctx, t, hostexec.New(time.Minute))
	dev, err := os.Open(a.Device)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		dev.Close()
	}()
	start := time.Now()
	if err := f.Detach(ctx, a); err != nil {
		t.Fatalf("Detach with the loop device held open for a second: %v", err)
	}
	if m, _ := hostmount.MountAt(a.FuseDir); m != nil || loopBacking(SysRoot, a.Device) != "" {
		t.Fatalf("left behind: mount %v, loop %s", m, loopBacking(SysRoot, a.Device))
	}
	t.Logf("Detach waited %v for the holder", time.Since(start).Round(time.Millisecond))
}

// TestFuseDetachDeadMountPinnedElsewhere: a filesystem on the loop device stays mounted in
// another mount namespace (a process that copied the host's mounts privately while the volume
// was staged, as `unshare --mount` does) after the node unmounted its own, and the rbd-fuse
// daemon has died. The node cannot unmount that copy; Detach must still leave nothing in its
// own namespace (the dead mount detached lazily) instead of failing "target is busy" for ever,
// and the kernel frees the loop device once the copy goes.
func TestFuseDetachDeadMountPinnedElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	x := hostexec.New(time.Minute)
	f, a, name := attachedImage(ctx, t, x)
	mnt := t.TempDir()
	if _, err := x.Run(ctx, "mkfs.ext4", "-q", a.Device); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Run(ctx, "mount", a.Device, mnt); err != nil {
		t.Fatal(err)
	}
	// the copy: a process in a mount namespace of its own, made while the filesystem is mounted
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	stopHolder := func() { _ = holder.Process.Kill(); _ = holder.Wait() }
	t.Cleanup(stopHolder)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", holder.Process.Pid)); strings.Contains(string(b), " "+mnt+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder's mount namespace never showed the filesystem")
		}
	}
	if _, err := x.Run(ctx, "umount", mnt); err != nil {
		t.Fatal(err)
	}
	pids, err := hostexec.Daemons("/proc", "rbd-fuse", a.FuseDir)
	if err != nil || len(pids) != 1 {
		t.Fatalf("rbd-fuse daemons %v, %v", pids, err)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(a.FuseDir, name)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(file); errors.Is(err, syscall.ENOTCONN) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rbd-fuse mount still answers after its daemon was killed")
		}
	}
	if err := f.Detach(ctx, a); err != nil {
		t.Fatalf("Detach of a dead mount pinned from another mount namespace: %v", err)
	}
	if m, _ := hostmount.MountAt(a.FuseDir); m != nil || exists(a.FuseDir) {
		t.Fatalf("left behind in the node's namespace: mount %v, dir %v", m, exists(a.FuseDir))
	}
	stopHolder()
	for deadline := time.Now().Add(10 * time.Second); loopBacking(SysRoot, a.Device) == file; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("loop device %s still on %s after the copy went", a.Device, file)
		}
	}
}

// attachedImage attaches a fresh image of the test pool with a Fuse running commands on x,
// detached again when t ends; it returns the attacher, the attachment and the image's name.
func attachedImage(ctx context.Context, t *testing.T, x hostexec.Executor) (*Fuse, Attachment, string) {
	t.Helper()
	cl, name, _ := fuseImage(t, "")
	f := NewFuse(x, cephtest.FuseServer())
	work := t.TempDir()
	req := Request{Image: Image{Pool: cl.RBDPool, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work}
	t.Cleanup(func() { _ = f.Detach(context.Background(), Attachment{Image: req.Image, WorkDir: work}) })
	a, err := f.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return f, a, name
}
