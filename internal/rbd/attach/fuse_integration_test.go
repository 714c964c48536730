package attach

import (
	"bytes"
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

// fuseRig is a real image and a pool for the FUSE attacher.
type fuseRig struct {
	t       *testing.T
	cl      cephtest.Cluster
	ctx     context.Context
	pool    *ceph.Pool
	onImage func(func(*rados.IOContext) error) error
	req     Request
}

// newFuseRig makes a 32 MiB image in the test pool's RADOS namespace ns ("": the default one,
// else one made for the test and removed with it).
func newFuseRig(t *testing.T, ns string) *fuseRig {
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
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
			io.SetNamespace(ns)
			return struct{}{}, fn(io)
		})
		return err
	}
	if ns != "" {
		if err := onImage(func(io *rados.IOContext) error { io.SetNamespace(""); return rbd.NamespaceCreate(io, ns) }); err != nil {
			t.Fatal(err)
		}
		// registered before the image's removal, so it runs after it
		t.Cleanup(func() {
			if err := onImage(func(io *rados.IOContext) error { io.SetNamespace(""); return rbd.NamespaceRemove(io, ns) }); err != nil {
				t.Errorf("namespace %s: %v", ns, err)
			}
		})
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

	// a work directory named like the node's (the image file is named after it)
	work := filepath.Join(t.TempDir(), fmt.Sprintf("%x", time.Now().UnixNano()))
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	return &fuseRig{t: t, cl: cl, ctx: ctx, pool: p, onImage: onImage,
		req: Request{Image: Image{Pool: cl.RBDPool, Namespace: ns, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work}}
}

// attacher is a Fuse on the rig's pool whose sessions end with the test; detach undoes what
// the test left attached (registered after the work directory, so it runs first).
func (r *fuseRig) attacher(x hostexec.Executor) *Fuse {
	f := NewFuse(x, r.pool)
	f.ConnectTimeout = 20 * time.Second
	r.t.Cleanup(func() { f.Shutdown(context.Background()) })
	return f
}

func (r *fuseRig) detachAtEnd(f *Fuse) {
	r.t.Cleanup(func() { _ = f.Detach(context.Background(), Attachment{Image: r.req.Image, WorkDir: r.req.WorkDir}) })
}

func (r *fuseRig) watchers() int {
	r.t.Helper()
	var n int
	if err := r.onImage(func(io *rados.IOContext) error {
		img, err := rbd.OpenImageReadOnly(io, r.req.Image.Name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer img.Close()
		w, err := img.ListWatchers()
		n = len(w)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// readImage reads n bytes at off through librbd, not through the attachment.
func (r *fuseRig) readImage(off int64, n int) []byte {
	r.t.Helper()
	buf := make([]byte, n)
	if err := r.onImage(func(io *rados.IOContext) error {
		img, err := rbd.OpenImageReadOnly(io, r.req.Image.Name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer img.Close()
		_, err = img.ReadAt(buf, off)
		return err
	}); err != nil {
		r.t.Fatal(err)
	}
	return buf
}

func writeDevice(t *testing.T, dev string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestFuseAttach attaches a real image: the only command is losetup, no key reaches a command
// line or a file, the device writes to the image, Attach is idempotent, Refresh follows a
// resize without a remount, and Detach leaves nothing behind, the image closed (no watcher)
// when it returns. An image in a RADOS namespace works as well: librbd in this process is told
// the pool and namespace (rbd-fuse 18.2.7 and 20.2.4, which this replaced, crash when given
// either).
func TestFuseAttach(t *testing.T) {
	t.Run("default namespace", func(t *testing.T) { testFuseAttach(t, "") })
	t.Run("namespace", func(t *testing.T) { testFuseAttach(t, fmt.Sprintf("attach-test-%d", time.Now().UnixNano()%1e9)) })
}

func testFuseAttach(t *testing.T, ns string) {
	r := newFuseRig(t, ns)
	ctx, req, work := r.ctx, r.req, r.req.WorkDir
	rec := &hostRecorder{x: hostexec.New(time.Minute)}
	f := r.attacher(rec)
	r.detachAtEnd(f)

	a, err := f.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fuse := filepath.Join(work, "fuse")
	if a.FuseDir != fuse || !strings.HasPrefix(a.Device, "/dev/loop") || a.Session == nil || a.Session.Minor == 0 {
		t.Fatalf("attachment = %+v", a)
	}
	if len(rec.calls) != 1 || !slices.Equal(rec.calls[0], []string{"losetup", "--find", "--show", "--direct-io=on", filepath.Join(fuse, FuseFileName(work))}) {
		t.Fatalf("commands %q, want one losetup", rec.calls)
	}
	if !loopDirectIO(SysRoot, a.Device) {
		t.Fatalf("%s does not do direct I/O on the FUSE file", a.Device)
	}
	if m, _ := hostmount.MountAt(fuse); m == nil || m.FsType != "fuse."+FuseSubtype {
		t.Fatalf("mount at %s: %+v", fuse, m)
	}
	assertNoKey(t, work, r.cl.Admin.Key())
	if err := f.Check(ctx, a); err != nil {
		t.Fatalf("Check: %v", err)
	}
	data := bytes.Repeat([]byte("monoceph"), 512)
	writeDevice(t, a.Device, 1<<20, data)
	if got := r.readImage(1<<20, len(data)); !bytes.Equal(got, data) {
		t.Fatal("data written to the loop device is not in the image")
	}

	if a2, err := f.Attach(ctx, req); err != nil || a2.Device != a.Device || len(rec.calls) != 1 {
		t.Fatalf("second Attach = %+v, %v, ran %q; want the same attachment and no command", a2, err, rec.calls[1:])
	}

	if err := r.onImage(func(io *rados.IOContext) error {
		img, err := rbd.OpenImage(io, req.Image.Name, rbd.NoSnapshot)
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
		// released as Detach returns: a DeleteVolume or an attach elsewhere right after an
		// unstage must not find the image in use
		if n := r.watchers(); i == 0 && n != 0 {
			t.Fatalf("after Detach the image has %d watchers, want 0", n)
		}
	}
	if m, _ := hostmount.MountAt(fuse); m != nil || exists(fuse) || loopBacking(SysRoot, a.Device) == filepath.Join(fuse, FuseFileName(work)) {
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

// TestFuseResume: the attacher that serves an image stops (as the holder does on SIGTERM)
// while another process keeps the FUSE connection; a new attacher given the connection serves
// the same loop device with the data intact; one that is not given it is refused rather than
// replace the device under its users; and an unstage before anyone resumed it still detaches
// everything. Without a kept connection, a dead mount is replaced by a new one.
func TestFuseResume(t *testing.T) {
	r := newFuseRig(t, "")
	ctx, req := r.ctx, r.req
	x := hostexec.New(time.Minute)
	first := r.attacher(x)
	r.detachAtEnd(first)
	a, err := first.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := first.Connection(a.FuseDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.File.Close() })
	data := bytes.Repeat([]byte("resumed!"), 512)
	writeDevice(t, a.Device, 2<<20, data)
	first.Shutdown(ctx)
	if n := r.watchers(); n != 0 {
		t.Fatalf("a stopped server keeps %d watchers", n)
	}

	second := r.attacher(x)
	r.detachAtEnd(second)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	second.ConnectTimeout = time.Second
	_, err = second.Attach(short, req)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "connection is still open") {
		t.Fatalf("Attach of a kept connection without it = %v, want a refusal", err)
	}
	second.ConnectTimeout = 20 * time.Second
	resumed := req
	resumed.Resume = conn
	b, err := second.Attach(ctx, resumed)
	if err != nil {
		t.Fatal(err)
	}
	if b.Device != a.Device {
		t.Fatalf("resumed on %s, was %s", b.Device, a.Device)
	}
	got := make([]byte, len(data))
	dev, err := os.Open(b.Device)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dev.ReadAt(got, 2<<20); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading the device after the resume: %v", err)
	}
	dev.Close()

	// stopped again; unstaged before anybody resumed it
	second.Shutdown(ctx)
	third := r.attacher(x)
	if err := third.DetachResuming(ctx, b, conn); err != nil {
		t.Fatal(err)
	}
	if m, _ := hostmount.MountAt(b.FuseDir); m != nil || loopBacking(SysRoot, b.Device) != "" {
		t.Fatalf("left behind after DetachResuming: mount %v, loop %q", m, loopBacking(SysRoot, b.Device))
	}

	// nobody keeps the connection: it ends with its server, and a new attach replaces it
	fourth := r.attacher(x)
	r.detachAtEnd(fourth)
	c, err := fourth.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	fourth.Shutdown(ctx)
	fifth := r.attacher(x)
	r.detachAtEnd(fifth)
	d, err := fifth.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := fifth.Check(ctx, d); err != nil {
		t.Fatalf("Check of the replaced attachment: %v", err)
	}
	if loopBacking(SysRoot, c.Device) != "" && c.Device != d.Device {
		t.Fatalf("the loop device on the dead connection (%s) is still bound", c.Device)
	}
	if err := fifth.Detach(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// assertNoKey fails when key is in a file under dir. Mounts are not entered: the image file
// is served by this very process, which must never hold a file of its own FUSE mount open
// (exiting with one open waits forever for the flush only it could answer).
func assertNoKey(t *testing.T, dir, key string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if m, _ := hostmount.MountAt(p); m != nil {
				return filepath.SkipDir
			}
			return nil
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(key)) {
			t.Errorf("key in %s", p)
		}
		return nil
	})
}
