package imagefs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"golang.org/x/sys/unix"
)

// TestMain makes the test binary the serving process Start runs: its arguments are then a
// JSON Config and the mount point.
func TestMain(m *testing.M) {
	if os.Getenv(ServeEnv) != "" {
		var cfg Config
		if err := json.Unmarshal([]byte(os.Args[1]), &cfg); err != nil {
			os.Exit(2)
		}
		os.Exit(Serve(cfg, os.Args[2]))
	}
	os.Exit(m.Run())
}

// fixture is an image in a RADOS namespace of its own (the case Debian 13's rbd-fuse cannot
// serve) and a key file for the admin user.
type fixture struct {
	cl      cephtest.Cluster
	io      *rados.IOContext
	ns      string
	keyFile string
}

func newFixture(t *testing.T) *fixture {
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE mounts)")
	}
	conn, err := rados.NewConnWithUser(cl.Admin.ID)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"mon_host": cl.Monitors, "key": cl.Admin.Key(), "client_mount_timeout": "10"} {
		if err := conn.SetConfigOption(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Shutdown)
	io, err := conn.OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(io.Destroy)
	f := &fixture{cl: cl, io: io, ns: fmt.Sprintf("imagefs-%d", time.Now().UnixNano()%1e9)}
	if err := rbd.NamespaceCreate(io, f.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		io.SetNamespace(f.ns)
		names, _ := rbd.GetImageNames(io)
		for _, n := range names {
			_ = rbd.RemoveImage(io, n)
		}
		io.SetNamespace("")
		if err := rbd.NamespaceRemove(io, f.ns); err != nil {
			t.Errorf("namespace %s left behind: %v", f.ns, err)
		}
	})
	var remove func()
	f.keyFile, remove, err = hostexec.WriteKeyFile(t.TempDir(), cl.Admin.Key())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	return f
}

func (f *fixture) image(t *testing.T, size uint64) string {
	name := fmt.Sprintf("img-%d", time.Now().UnixNano())
	f.io.SetNamespace(f.ns)
	o := rbd.NewRbdImageOptions()
	defer o.Destroy()
	if err := rbd.CreateImage(f.io, name, size, o); err != nil {
		t.Fatal(err)
	}
	return name
}

func (f *fixture) config(image string, readOnly bool) Config {
	return Config{MonHost: f.cl.Monitors, ID: f.cl.Admin.ID, KeyFile: f.keyFile, ConnectTimeout: 10 * time.Second,
		Pool: f.cl.RBDPool, Namespace: f.ns, Image: image, ReadOnly: readOnly}
}

// serve mounts the image in this process and unmounts it when the test ends.
func (f *fixture) serve(t *testing.T, cfg Config) string {
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	srv, err := s.Mount(dir)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		srv.Wait()
		s.Close()
	})
	return filepath.Join(dir, cfg.Image)
}

// TestImageFile reads and writes an image in a RADOS namespace through the mount, and checks
// each against librbd itself: data, size after a resize, holes punched as a loop device
// discards, writes past the end, truncation.
func TestImageFile(t *testing.T) {
	f := newFixture(t)
	name := f.image(t, 16<<20)
	file := f.serve(t, f.config(name, false))

	fh, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil || st.Size() != 16<<20 {
		t.Fatalf("stat: %v, size %d, want %d", err, st.Size(), 16<<20)
	}
	const at = 2<<20 + 123
	data := bytes.Repeat([]byte("monoceph"), 1<<19) // 4 MiB: [2 MiB+123, 6 MiB+123)
	if _, err := fh.WriteAt(data, at); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	img, err := rbd.OpenImageReadOnly(f.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := img.ReadAt(got, at); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("librbd reads back something else than the mount wrote (%v)", err)
	}
	_ = img.Close()
	if _, err := fh.ReadAt(got, at); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the mount reads back something else than it wrote (%v)", err)
	}

	// holes (as a loop device sends discards), one not aligned to librbd's 64 KiB discard
	// granularity: zeros exactly there, the data around them untouched
	want := bytes.Clone(data)
	for _, h := range [][2]int64{{4 << 20, 1 << 20}, {3<<20 + 1000, 70000}} {
		if err := unix.Fallocate(int(fh.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, h[0], h[1]); err != nil {
			t.Fatalf("punch hole %v: %v", h, err)
		}
		clear(want[h[0]-at : h[0]+h[1]-at])
	}
	if _, err := fh.ReadAt(got, at); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("after punching holes the file does not read as the data with zeros exactly there")
	}
	if err := unix.Fallocate(int(fh.Fd()), 0, 0, 4096); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("preallocation: %v, want EOPNOTSUPP", err)
	}

	// the file never grows or shrinks: the controller resizes images
	if _, err := fh.WriteAt([]byte("x"), 16<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write past the end: %v, want ENOSPC", err)
	}
	if err := fh.Truncate(1 << 20); !errors.Is(err, syscall.EPERM) {
		t.Errorf("truncate: %v, want EPERM", err)
	}

	// a resize made elsewhere shows at once (librbd hears of it through the header's watch)
	rw, err := rbd.OpenImage(f.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Resize(32 << 20); err != nil {
		t.Fatal(err)
	}
	_ = rw.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := os.Stat(file)
		if err == nil && st.Size() == 32<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a resize to 32 MiB the file is %v (%v)", st.Size(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if entries, err := os.ReadDir(filepath.Dir(file)); err != nil || len(entries) != 1 || entries[0].Name() != name {
		t.Errorf("the mount holds %v (%v), want only %s", entries, err, name)
	}
}

// TestReadOnly mounts an image read-only: no write access at any level, and no exclusive lock
// taken, so another client may hold it.
func TestReadOnly(t *testing.T) {
	f := newFixture(t)
	name := f.image(t, 8<<20)
	file := f.serve(t, f.config(name, true))
	if _, err := os.OpenFile(file, os.O_RDWR, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open for writing: %v, want EROFS", err)
	}
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	buf := make([]byte, 4096)
	if _, err := fh.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	m, err := hostmount.MountAt(filepath.Dir(file))
	if err != nil || m == nil {
		t.Fatalf("no mount at %s: %v", filepath.Dir(file), err)
	}
	// another writer works meanwhile: the read-only mount holds no exclusive lock
	rw, err := rbd.OpenImage(f.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	if _, err := rw.WriteAt([]byte("written elsewhere"), 0); err != nil {
		t.Fatalf("a second client cannot write beside the read-only mount: %v", err)
	}
}

// TestDaemon runs the serving process as the node plugin does (Start): it mounts, a missing
// image is a NotFoundError with nothing mounted, and it exits once the mount is unmounted.
func TestDaemon(t *testing.T) {
	f := newFixture(t)
	name := f.image(t, 8<<20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(cfg Config, dir string) error {
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return Start(ctx, os.Args[0], []string{string(b), dir}, 30*time.Second)
	}

	dir := t.TempDir()
	if err := start(f.config("missing", false), dir); !errors.As(err, new(*NotFoundError)) {
		t.Fatalf("missing image: %v, want a NotFoundError", err)
	}
	if m, _ := hostmount.MountAt(dir); m != nil {
		t.Fatalf("a failed start left a mount at %s", dir)
	}

	if err := start(f.config(name, false), dir); err != nil {
		t.Fatal(err)
	}
	pids, err := hostexec.Daemons("/proc", DaemonName, dir)
	if err != nil || len(pids) != 1 {
		t.Fatalf("serving processes for %s: %v (%v)", dir, pids, err)
	}
	if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() != 8<<20 {
		t.Fatalf("image file: %v", err)
	}
	// the key file may go once Start returned: the daemon is connected
	if err := os.Remove(f.keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(dir, name)); err != nil {
		t.Fatalf("reading after the key file went: %v", err)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	if err := hostexec.StopDaemons(ctx, "/proc", DaemonName, dir, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// the image's watch went with the daemon: nothing holds it
	img, err := rbd.OpenImage(f.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if w, err := img.ListWatchers(); err != nil || len(w) != 1 {
		t.Errorf("watchers after the daemon exited: %v (%v), want only this test's", w, err)
	}
}
