package attach

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
)

// zonesPool is the size-2 pool of scripts/ceph-zones.sh (one replica in zone z1 on osd.0, one
// in z2 on osd.1); the tests that need it skip on other clusters.
func zonesPool(t *testing.T) (cephtest.Cluster, string) {
	cl := cephtest.Env(t)
	pool := os.Getenv("CEPH_ZONES_POOL")
	if pool == "" {
		t.Skip("needs the two-zone cluster of scripts/ceph-zones.sh (make test-zones)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	return cl, pool
}

// osdReadOps reads each OSD's op_r counter (client reads it served).
func osdReadOps(t *testing.T, osds ...int) []int64 {
	t.Helper()
	out := make([]int64, len(osds))
	for i, osd := range osds {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b, err := exec.CommandContext(ctx, "ceph", "tell", fmt.Sprintf("osd.%d", osd), "perf", "dump").Output()
		cancel()
		if err != nil {
			t.Fatalf("ceph tell osd.%d perf dump: %v", osd, err)
		}
		var dump struct {
			OSD struct {
				OpR int64 `json:"op_r"`
			} `json:"osd"`
		}
		if err := json.Unmarshal(b, &dump); err != nil {
			t.Fatalf("osd.%d perf dump: %v", osd, err)
		}
		out[i] = dump.OSD.OpR
	}
	return out
}

// TestZonesReadAffinity reads a 256 MiB image through the FUSE server twice, without a CRUSH
// location and as a client in zone z1, and counts the read operations each OSD served: with
// the location most of them land on z1's OSD (osd.0), without it they follow the PGs'
// primaries, about half on each.
func TestZonesReadAffinity(t *testing.T) {
	cl, pool := zonesPool(t)
	const size = 256 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := ceph.NewPool(ceph.PoolOptions{})
	defer p.Close()
	conn, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	onPool := func(fn func(*rados.IOContext) error) error {
		_, err := ceph.Call(ctx, conn, "librbd", func(c *rados.Conn) (struct{}, error) {
			io, err := c.OpenIOContext(pool)
			if err != nil {
				return struct{}{}, err
			}
			defer io.Destroy()
			return struct{}{}, fn(io)
		})
		return err
	}
	name := fmt.Sprintf("affinity-%d", time.Now().UnixNano())
	if err := onPool(func(io *rados.IOContext) error {
		o := rbd.NewRbdImageOptions()
		defer o.Destroy()
		if err := rbd.CreateImage(io, name, size, o); err != nil {
			return err
		}
		img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer img.Close()
		buf := make([]byte, 4<<20)
		for i := range buf {
			buf[i] = byte(i*7 + 1)
		}
		for off := int64(0); off < size; off += int64(len(buf)) {
			if _, err := img.WriteAt(buf, off); err != nil {
				return err
			}
		}
		// A replica serves a read only once it knows the object's last write is on disk
		// everywhere (else it bounces the read to the primary); that news travels with the
		// PG's next write. A few writes to every PG stand in for a cluster's steady traffic.
		for i := range 512 {
			if err := io.WriteFull(fmt.Sprintf("affinity-pad-%d", i), []byte{1}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d MiB", size>>20)
	defer func() {
		_ = onPool(func(io *rados.IOContext) error {
			for i := range 512 {
				_ = io.Delete(fmt.Sprintf("affinity-pad-%d", i))
			}
			return rbd.RemoveImage(io, name)
		})
	}()

	share := func(t *testing.T, crushLocation string) float64 {
		work := filepath.Join(t.TempDir(), fmt.Sprintf("%x", time.Now().UnixNano()))
		if err := os.Mkdir(work, 0o700); err != nil {
			t.Fatal(err)
		}
		f := NewFuse(hostexec.New(time.Minute), p)
		defer f.Shutdown(context.Background())
		req := Request{Image: Image{Pool: pool, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work,
			ReadOnly: true, CrushLocation: crushLocation}
		a, err := f.Attach(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := f.Detach(context.Background(), a); err != nil {
				t.Error(err)
			}
		}()
		before := osdReadOps(t, 0, 1)
		// through the loop device, as a pod's reads come
		fh, err := os.Open(a.Device)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.CopyBuffer(io.Discard, fh, make([]byte, 1<<20))
		fh.Close()
		if err != nil || n != size {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		after := osdReadOps(t, 0, 1)
		z1, z2 := after[0]-before[0], after[1]-before[1]
		pct := 100 * float64(z1) / float64(z1+z2)
		t.Logf("crush location %q: osd.0 (z1) served %d reads, osd.1 (z2) %d: %.1f%% from z1", crushLocation, z1, z2, pct)
		return pct
	}
	var without, with float64
	t.Run("without", func(t *testing.T) { without = share(t, "") })
	t.Run("zone z1", func(t *testing.T) { with = share(t, "zone=z1 host=n1") })
	if with < 90 {
		t.Errorf("with read affinity %.1f%% of the reads came from z1's OSD, want at least 90%%", with)
	}
	if without > 80 {
		t.Errorf("without read affinity %.1f%% of the reads came from z1's OSD: the pool's primaries are not spread over both zones, the test proves nothing", without)
	}
}
