package attach

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
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
// follows a resize without a remount, and Detach leaves nothing behind.
func TestFuseAttach(t *testing.T) {
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	conn, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	onImage := func(fn func(*rados.IOContext) error) error {
		_, err := ceph.Call(context.Background(), conn, "librbd", func(c *rados.Conn) (struct{}, error) {
			io, err := c.OpenIOContext(cl.RBDPool)
			if err != nil {
				return struct{}{}, err
			}
			defer io.Destroy()
			return struct{}{}, fn(io)
		})
		return err
	}
	name := fmt.Sprintf("attach-test-%d", time.Now().UnixNano())
	if err := onImage(func(io *rados.IOContext) error {
		o := rbd.NewRbdImageOptions()
		defer o.Destroy()
		return rbd.CreateImage(io, name, 32<<20, o)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			err := onImage(func(io *rados.IOContext) error { return rbd.RemoveImage(io, name) })
			if err == nil || time.Now().After(deadline) {
				return
			}
		}
	})

	rec := &hostRecorder{x: hostexec.New(time.Minute)}
	f := NewFuse(rec)
	f.ConnectTimeout = 20 * time.Second
	work := t.TempDir()
	req := Request{Image: Image{Pool: cl.RBDPool, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work}
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
	want := []string{"rbd-fuse", "-c", filepath.Join(work, "ceph.conf"), "-m", cl.Monitors, "--id", cl.Admin.ID, "--keyfile", kf,
		"--client_mount_timeout=20", "--admin_socket=", "--log_file="}
	if cl.RBDPool != "rbd" { // rbd-fuse's default pool is not named
		want = append(want, "--poolname="+cl.RBDPool)
	}
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
		if pids, err := hostexec.Daemons("/proc", "rbd-fuse", fuse); err != nil || len(pids) != 0 {
			t.Fatalf("rbd-fuse %v (%v) still running after Detach", pids, err)
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
