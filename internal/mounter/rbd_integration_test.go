package mounter

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/rbd/attach"
)

// rbdHolder starts an RBD holder in this process.
func rbdHolder(t *testing.T, stateDir string, pool *ceph.Pool) (*Server, func()) {
	t.Helper()
	f := attach.NewFuse(hostexec.New(time.Minute), pool)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Listen(ctx, ServerOptions{Endpoint: "unix://" + filepath.Join(stateDir, "mounter.sock"), Type: "rbd", RBD: f, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	var once sync.Once
	stop := func() { once.Do(func() { s.Shutdown(10 * time.Second) }) }
	t.Cleanup(stop)
	return s, stop
}

// TestRBDCustodyAcrossHolders: the plugin side attaches through a holder and keeps the FUSE
// connection the holder hands back; the holder stops (SIGTERM, an upgrade) while a write to
// the loop device waits in the kernel; the next holder is given the connection by the next
// attach, the write completes, the device is the same and the data is intact; detaching
// through the holder gives the connection up and leaves nothing.
func TestRBDCustodyAcrossHolders(t *testing.T) {
	r := newImageRig(t, "mounter-test")
	cl, pool, name, state, work := r.cl, r.pool, r.name, r.state, r.work
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := r.onImage(func(io *rados.IOContext) error {
		o := rbd.NewRbdImageOptions()
		defer o.Destroy()
		return rbd.CreateImage(io, name, 32<<20, o)
	}); err != nil {
		t.Fatal(err)
	}

	_, stopFirst := rbdHolder(t, state, pool)
	c, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.RBD(attach.NewFuse(hostexec.New(time.Minute), nil))
	req := attach.Request{Image: attach.Image{Pool: cl.RBDPool, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work}
	at, err := a.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Detach(context.Background(), at) })
	if c.Kept() != 1 {
		t.Fatalf("connections in custody: %d, want 1", c.Kept())
	}
	if err := a.Check(ctx, at); err != nil {
		t.Fatalf("Check from the plugin's side: %v", err)
	}

	stopFirst()
	data := bytes.Repeat([]byte("handover"), 512)
	written := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(at.Device, os.O_WRONLY|os.O_SYNC, 0)
		if err == nil {
			_, err = f.WriteAt(data, 4<<20)
			f.Close()
		}
		written <- err
	}()
	select {
	case err := <-written:
		t.Fatalf("a write completed with no holder serving: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	second, _ := rbdHolder(t, state, pool)
	start := time.Now()
	bt, err := a.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatalf("the write waiting across the holder restart: %v", err)
	}
	t.Logf("holder %s resumed the connection, the waiting write completed %v after the attach began", second.Instance(), time.Since(start).Round(time.Millisecond))
	if bt.Device != at.Device {
		t.Fatalf("device after the restart %s, before %s", bt.Device, at.Device)
	}
	got := make([]byte, len(data))
	f, err := os.Open(bt.Device)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(got, 4<<20)
	f.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading back: %v", err)
	}
	if err := a.Detach(ctx, bt); err != nil {
		t.Fatal(err)
	}
	if c.Kept() != 0 {
		t.Fatalf("connections in custody after Detach: %d", c.Kept())
	}
	if m, _ := hostmount.MountAt(bt.FuseDir); m != nil {
		t.Fatalf("still mounted: %+v", m)
	}
	if b, _ := os.ReadFile(filepath.Join("/sys/block", filepath.Base(bt.Device), "loop/backing_file")); bytes.Contains(b, []byte(filepath.Base(work))) {
		t.Fatalf("loop device left: %s", b)
	}
}

// imageRig is where the RBD holder tests start: the local cluster, the pool the holders
// connect through, an image name of the test's own (the test creates the image; it is removed
// at the end, retried while a stopped holder's session still has it open), and a state
// directory with one work directory.
type imageRig struct {
	cl          cephtest.Cluster
	pool        *ceph.Pool
	name        string
	state, work string
	// onImage runs fn on an I/O context of the cluster's RBD pool.
	onImage func(fn func(*rados.IOContext) error) error
}

func newImageRig(t *testing.T, prefix string) *imageRig {
	t.Helper()
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	conn, err := pool.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	r := &imageRig{cl: cl, pool: pool, name: fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()), state: t.TempDir()}
	r.onImage = func(fn func(*rados.IOContext) error) error {
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
	t.Cleanup(func() {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err := r.onImage(func(io *rados.IOContext) error { return rbd.RemoveImage(io, r.name) }); err == nil || ceph.Is(err, ceph.ErrNotFound) {
				return
			}
		}
	})
	r.work = filepath.Join(r.state, "0123456789abcdef01234567")
	if err := os.Mkdir(r.work, 0o700); err != nil {
		t.Fatal(err)
	}
	return r
}
