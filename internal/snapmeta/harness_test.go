package snapmeta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/volid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// env is an Engine on the local cluster behind the real gRPC plumbing (server.NewGRPC on a
// unix socket, so the interceptors run), plus an admin connection that writes test data
// through librbd in a RADOS namespace of the test's own.
type env struct {
	cl     cephtest.Cluster
	engine *Engine
	client csi.SnapshotMetadataClient
	sock   string
	conn   *ceph.Conn
	io     *rados.IOContext
	ns     string
	poolID int64
	// reg holds the CSI socket server's metrics
	reg *prometheus.Registry
}

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	cl := cephtest.Env(t)
	dir := t.TempDir()
	store := cl.Clusters(t, "")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	opts.Clusters, opts.Pool = store, pool
	if opts.MaxStreamDuration == 0 {
		// as the driver's default does: a stream stuck in librbd (one rbd_open_read_only hung
		// for 29 minutes in a make test run, on a healthy cluster) fails its test, not the
		// package's whole time budget
		opts.MaxStreamDuration = 2 * time.Minute
	}
	e := &env{cl: cl, engine: NewEngine(opts)}

	// the stream deadline as the driver sets it on the CSI socket
	e.reg = prometheus.NewRegistry()
	g, err := server.NewGRPC("unix://"+filepath.Join(dir, "csi.sock"), server.NewMetrics(e.reg), DeadlineOptions(opts.MaxStreamDuration)...)
	if err != nil {
		t.Fatal(err)
	}
	csi.RegisterSnapshotMetadataServer(g.Server, NewCSIServer(e.engine))
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { g.Shutdown(5 * time.Second) })
	e.sock = g.Path()
	e.client = csi.NewSnapshotMetadataClient(e.dial(t))

	if e.conn, err = pool.Get(context.Background(), cl.Monitors, cl.Admin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.conn.Release)
	if e.io, err = e.conn.Rados().OpenIOContext(cl.RBDPool); err != nil {
		t.Fatal(err)
	}
	if e.poolID, err = e.conn.Rados().GetPoolByName(cl.RBDPool); err != nil {
		t.Fatal(err)
	}
	e.ns = fmt.Sprintf("sm%d", time.Now().UnixNano()%1e12)
	if err := rbd.NamespaceCreate(e.io, e.ns); err != nil {
		t.Fatal(err)
	}
	e.io.SetNamespace(e.ns)
	t.Cleanup(func() { e.purge() })
	return e
}

// dial connects to the CSI socket; extra options shape the client (window sizes).
func (e *env) dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+e.sock, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// purge removes the test's images (clones first) and its namespace.
func (e *env) purge() {
	for range 3 { // clones before their parents
		names, _ := rbd.GetImageNames(e.io)
		for _, n := range names {
			if img, err := rbd.OpenImage(e.io, n, rbd.NoSnapshot); err == nil {
				snaps, _ := img.GetSnapshotNames()
				for _, s := range snaps {
					_ = img.GetSnapshot(s.Name).Remove()
				}
				img.Close()
			}
			_ = rbd.RemoveImage(e.io, n)
		}
	}
	trash, _ := rbd.GetTrashList(e.io)
	for _, tr := range trash {
		_ = rbd.TrashRemove(e.io, tr.Id, true)
	}
	if root, err := e.conn.Rados().OpenIOContext(e.cl.RBDPool); err == nil {
		_ = rbd.NamespaceRemove(root, e.ns)
		root.Destroy()
	}
	e.io.Destroy()
}

// image is an RBD image laid out as the driver lays out volumes.
type image struct {
	e    *env
	id   volid.RBDVolume
	name string
	img  *rbd.Image
	size uint64
	// objSize is the RADOS object size
	objSize int64
}

const features = rbd.FeatureLayering | rbd.FeatureExclusiveLock | rbd.FeatureObjectMap | rbd.FeatureFastDiff | rbd.FeatureDeepFlatten

func (e *env) uid(t testing.TB) string {
	u, err := volid.NewUID('a')
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func (e *env) newImage(t testing.TB, size uint64) *image {
	t.Helper()
	return e.newImageOrder(t, size, 22)
}

// newImageOrder makes an image of 2^order-byte objects. Fixtures with many small extents use
// small objects: memstore copies a whole object on each write to it after a snapshot, which
// makes 4 MiB objects slow to riddle with 512-byte writes.
func (e *env) newImageOrder(t testing.TB, size uint64, order uint64) *image {
	t.Helper()
	id := volid.RBDVolume{ClusterID: e.cl.ID, PoolID: e.poolID, Namespace: e.ns, UID: e.uid(t)}
	name := rbdname.Image(id.UID)
	o := rbd.NewRbdImageOptions()
	defer o.Destroy()
	if err := o.SetUint64(rbd.ImageOptionFeatures, features); err != nil {
		t.Fatal(err)
	}
	if err := o.SetUint64(rbd.ImageOptionOrder, order); err != nil {
		t.Fatal(err)
	}
	if err := rbd.CreateImage(e.io, name, size, o); err != nil {
		t.Fatal(err)
	}
	return e.openImage(t, id, size)
}

func (e *env) openImage(t testing.TB, id volid.RBDVolume, size uint64) *image {
	t.Helper()
	name := rbdname.Image(id.UID)
	img, err := rbd.OpenImage(e.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	st, err := img.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return &image{e: e, id: id, name: name, img: img, size: size, objSize: int64(st.Obj_size)}
}

// write fills [off, off+n) with b through librbd.
func (im *image) write(t testing.TB, off, n int64, b byte) {
	t.Helper()
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = b
	}
	if _, err := im.img.WriteAt(buf, off); err != nil {
		t.Fatalf("write %d+%d: %v", off, n, err)
	}
}

func (im *image) discard(t testing.TB, off, n int64) {
	t.Helper()
	if _, err := im.img.Discard(uint64(off), uint64(n)); err != nil {
		t.Fatalf("discard %d+%d: %v", off, n, err)
	}
}

// writeStrided writes n bytes at every stride from off to the end of the image, with 8
// writers: many small extents in seconds.
func (im *image) writeStrided(t testing.TB, off, n, stride int64) int {
	t.Helper()
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = 0xab
	}
	offs := make(chan int64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range offs {
				if _, err := im.img.WriteAt(buf, o); err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
				}
			}
		}()
	}
	count := 0
	for o := off; o+n <= int64(im.size); o += stride {
		offs <- o
		count++
	}
	close(offs)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
	return count
}

// snap cuts a snapshot named as the driver names CSI snapshots and returns its CSI ID.
func (im *image) snap(t testing.TB) volid.RBDSnapshot {
	t.Helper()
	id := volid.RBDSnapshot{RBDVolume: im.id, SnapUID: im.e.uid(t)}
	if _, err := im.img.CreateSnapshot(rbdname.Snapshot(id.SnapUID)); err != nil {
		t.Fatal(err)
	}
	return id
}

// clone makes a clone v2 volume of snapshot s of im.
func (im *image) clone(t testing.TB, s volid.RBDSnapshot) *image {
	t.Helper()
	id := volid.RBDVolume{ClusterID: im.e.cl.ID, PoolID: im.e.poolID, Namespace: im.e.ns, UID: im.e.uid(t)}
	o := rbd.NewRbdImageOptions()
	defer o.Destroy()
	if err := o.SetUint64(rbd.ImageOptionFeatures, features); err != nil {
		t.Fatal(err)
	}
	if err := o.SetUint64(rbd.ImageOptionCloneFormat, 2); err != nil {
		t.Fatal(err)
	}
	if err := rbd.CloneImage(im.e.io, im.name, rbdname.Snapshot(s.SnapUID), im.e.io, rbdname.Image(id.UID), o); err != nil {
		t.Fatal(err)
	}
	return im.e.openImage(t, id, im.size)
}

// oracle runs `rbd diff --format json` on the same snapshots and returns its extents,
// coalesced: data only for an allocated query, data and holes for a delta.
func (e *env) oracle(t testing.TB, target volid.RBDSnapshot, base *volid.RBDSnapshot, wholeObject bool) []Extent {
	t.Helper()
	args := []string{"diff", "--format", "json"}
	if base != nil {
		args = append(args, "--from-snap", rbdname.Snapshot(base.SnapUID))
	}
	if wholeObject {
		args = append(args, "--whole-object")
	}
	args = append(args, fmt.Sprintf("%s/%s/%s@%s", e.cl.RBDPool, e.ns, rbdname.Image(target.UID), rbdname.Snapshot(target.SnapUID)))
	out, err := exec.Command("rbd", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("rbd %v: %v: %s", args, err, ee.Stderr)
		}
		t.Fatalf("rbd %v: %v (CEPH_ARGS from scripts/ceph-local.sh env must be set)", args, err)
	}
	var raw []struct {
		Offset int64  `json:"offset"`
		Length int64  `json:"length"`
		Exists string `json:"exists"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("rbd diff output: %v: %s", err, out)
	}
	var ext []Extent
	for _, r := range raw {
		if base == nil && r.Exists != "true" {
			continue
		}
		ext = appendCoalesced(ext, Extent{r.Offset, r.Length})
	}
	return ext
}

func appendCoalesced(ext []Extent, x Extent) []Extent {
	if n := len(ext); n > 0 && x.Offset <= ext[n-1].End() {
		if x.End() > ext[n-1].End() {
			ext[n-1].Length = x.End() - ext[n-1].Offset
		}
		return ext
	}
	return append(ext, x)
}

// stream is one RPC's result.
type stream struct {
	headers  []Header
	messages [][]Extent
	extents  []Extent
}

type receiver interface {
	GetBlockMetadataType() csi.BlockMetadataType
	GetVolumeCapacityBytes() int64
	GetBlockMetadata() []*csi.BlockMetadata
}

func collect[R receiver](t testing.TB, recv func() (R, error)) (stream, error) {
	t.Helper()
	var s stream
	for {
		r, err := recv()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		h := Header{Style: Variable, Capacity: r.GetVolumeCapacityBytes()}
		if r.GetBlockMetadataType() == csi.BlockMetadataType_FIXED_LENGTH {
			h.Style = Fixed
		} else if r.GetBlockMetadataType() != csi.BlockMetadataType_VARIABLE_LENGTH {
			t.Errorf("block_metadata_type %v", r.GetBlockMetadataType())
		}
		var msg []Extent
		for _, b := range r.GetBlockMetadata() {
			msg = append(msg, Extent{b.GetByteOffset(), b.GetSizeBytes()})
		}
		s.headers = append(s.headers, h)
		s.messages = append(s.messages, msg)
		s.extents = append(s.extents, msg...)
	}
}

func (e *env) allocated(t testing.TB, target volid.RBDSnapshot, start int64, max int32) (stream, error) {
	t.Helper()
	st, err := e.client.GetMetadataAllocated(context.Background(), &csi.GetMetadataAllocatedRequest{
		SnapshotId: target.String(), StartingOffset: start, MaxResults: max, Secrets: e.cl.Secrets()})
	if err != nil {
		return stream{}, err
	}
	return collect(t, st.Recv)
}

func (e *env) delta(t testing.TB, base, target volid.RBDSnapshot, start int64, max int32) (stream, error) {
	t.Helper()
	st, err := e.client.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{
		BaseSnapshotId: base.String(), TargetSnapshotId: target.String(), StartingOffset: start, MaxResults: max, Secrets: e.cl.Secrets()})
	if err != nil {
		return stream{}, err
	}
	return collect(t, st.Recv)
}

// checkWellFormed checks the spec's rules for one stream: a constant header, at most max
// tuples per message, ascending, non-overlapping, coalesced (VARIABLE_LENGTH) or of one size
// (FIXED_LENGTH), nothing ending at or before start.
func checkWellFormed(t testing.TB, s stream, capacity int64, style Style, start int64, max int) {
	t.Helper()
	if len(s.messages) == 0 {
		t.Fatal("no message: the stream must carry the capacity at least once")
	}
	for i, h := range s.headers {
		if h.Capacity != capacity || h.Style != style {
			t.Fatalf("message %d: header %+v, want capacity %d style %v", i, h, capacity, style)
		}
		if len(s.messages[i]) > max {
			t.Fatalf("message %d has %d tuples, max_results %d", i, len(s.messages[i]), max)
		}
	}
	for i, x := range s.extents {
		if x.Length <= 0 {
			t.Fatalf("extent %d: %v has no length", i, x)
		}
		if i == 0 && x.End() <= start {
			t.Fatalf("first extent %v ends before starting_offset %d", x, start)
		}
		if i == 0 {
			continue
		}
		prev := s.extents[i-1]
		switch {
		case x.Offset < prev.End():
			t.Fatalf("extent %d: %v overlaps or precedes %v", i, x, prev)
		case style == Variable && x.Offset == prev.End():
			t.Fatalf("extent %d: %v adjacent to %v, not coalesced", i, x, prev)
		case style == Fixed && x.Length != prev.Length:
			t.Fatalf("extent %d: %v, FIXED_LENGTH size was %d", i, x, prev.Length)
		}
	}
}

// clip cuts ext to what lies at or after start.
func clip(ext []Extent, start int64) []Extent {
	var out []Extent
	for _, x := range ext {
		switch {
		case x.End() <= start:
		case x.Offset < start:
			out = append(out, Extent{start, x.End() - start})
		default:
			out = append(out, x)
		}
	}
	return out
}

// blocks rounds extents out to whole blocks, one tuple per block.
func blocks(ext []Extent, size int64) []Extent {
	var out []Extent
	for _, x := range ext {
		for b := x.Offset - x.Offset%size; b < x.End(); b += size {
			if n := len(out); n == 0 || out[n-1].Offset < b {
				out = append(out, Extent{b, size})
			}
		}
	}
	return out
}
