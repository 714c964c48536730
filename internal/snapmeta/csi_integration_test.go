package snapmeta

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	KiB = int64(1) << 10
	MiB = int64(1) << 20
)

// history is an image with three snapshots over known writes, overwrites and a discard,
// touching sub-object ranges, ranges across object boundaries and objects new in later
// snapshots.
type history struct {
	img        *image
	s1, s2, s3 volid.RBDSnapshot
}

func newHistory(t *testing.T, e *env) history {
	h := history{img: e.newImage(t, 64<<20)}
	im := h.img
	im.write(t, 0, 64*KiB, 1)
	im.write(t, 4*MiB-8*KiB, 16*KiB, 2) // across objects 0 and 1
	im.write(t, 10*MiB+512, 3*KiB, 3)
	im.write(t, 20*MiB, 4*MiB, 4) // one whole object
	h.s1 = im.snap(t)
	im.write(t, 16*KiB, 4*KiB, 5)         // inside the first write
	im.write(t, 4*MiB-2*KiB, 4*KiB, 6)    // across objects again
	im.write(t, 10*MiB+8*KiB, 512, 7)     // near an existing extent
	im.discard(t, 20*MiB+1*MiB, 1*MiB)    // a hole in the whole object
	im.write(t, 40*MiB+100*KiB, 8*KiB, 8) // an object new since s1
	h.s2 = im.snap(t)
	im.write(t, 63*MiB, 1*MiB, 9) // the last object
	for o := int64(0); o < 2*MiB; o += 64 * KiB {
		im.write(t, 30*MiB+o, 4*KiB, 10) // many small extents in one object
	}
	h.s3 = im.snap(t)
	return h
}

func TestMatchesRBDDiff(t *testing.T) {
	e := newEnv(t, Options{})
	h := newHistory(t, e)
	size := int64(h.img.size)
	for _, c := range []struct {
		name         string
		base, target volid.RBDSnapshot
		delta        bool
	}{
		{name: "allocated s1", target: h.s1},
		{name: "allocated s2", target: h.s2},
		{name: "allocated s3", target: h.s3},
		{name: "delta s1 s2", base: h.s1, target: h.s2, delta: true},
		{name: "delta s2 s3", base: h.s2, target: h.s3, delta: true},
		{name: "delta s1 s3", base: h.s1, target: h.s3, delta: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var (
				s    stream
				err  error
				want []Extent
			)
			if c.delta {
				s, err = e.delta(t, c.base, c.target, 0, 0)
				want = e.oracle(t, c.target, &c.base, false)
			} else {
				s, err = e.allocated(t, c.target, 0, 0)
				want = e.oracle(t, c.target, nil, false)
			}
			if err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, s, size, Variable, 0, DefaultMaxResults)
			if len(want) == 0 {
				t.Fatal("the oracle found nothing: the test writes nothing?")
			}
			if !reflect.DeepEqual(s.extents, want) {
				t.Errorf("extents\n got %v\nwant %v (rbd diff)", s.extents, want)
			}
		})
	}
	// the expectations the oracle must meet too: byte-exact overwrites in objects that
	// existed before, whole objects where they did not
	s, err := e.delta(t, h.s1, h.s2, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantDelta := []Extent{
		{16 * KiB, 4 * KiB},
		{4*MiB - 2*KiB, 4 * KiB},
		// the write at 8 KiB grew the object, which ended at 3.5 KiB in s1: the bytes in
		// between read as zeros now and did not exist before, so they changed too
		{10*MiB + 3584, 5 * KiB},
		{21 * MiB, 1 * MiB},
		{40 * MiB, 108 * KiB}, // a new object, from its start
	}
	if !reflect.DeepEqual(s.extents, wantDelta) {
		t.Errorf("delta s1 s2\n got %v\nwant %v", s.extents, wantDelta)
	}
}

func TestCloneIncludesParent(t *testing.T) {
	e := newEnv(t, Options{})
	parent := e.newImage(t, 32<<20)
	parent.write(t, 1*MiB, 64*KiB, 1)
	parent.write(t, 9*MiB, 4*KiB, 2)
	ps := parent.snap(t)
	child := parent.clone(t, ps)
	child.write(t, 17*MiB, 8*KiB, 3)
	child.write(t, 1*MiB+4*KiB, 4*KiB, 4) // copy-up of the parent's object
	cs := child.snap(t)

	s, err := e.allocated(t, cs, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkWellFormed(t, s, 32<<20, Variable, 0, DefaultMaxResults)
	if want := e.oracle(t, cs, nil, false); !reflect.DeepEqual(s.extents, want) {
		t.Errorf("extents\n got %v\nwant %v (rbd diff)", s.extents, want)
	}
	for _, parentData := range []Extent{{1 * MiB, 64 * KiB}, {9 * MiB, 4 * KiB}} {
		if !covered(s.extents, parentData) {
			t.Errorf("parent data %v missing from the clone's allocated extents %v", parentData, s.extents)
		}
	}
}

func covered(ext []Extent, x Extent) bool {
	for _, e := range ext {
		if e.Offset <= x.Offset && x.End() <= e.End() {
			return true
		}
	}
	return false
}

func TestResumeFromStartingOffset(t *testing.T) {
	e := newEnv(t, Options{})
	h := newHistory(t, e)
	full, err := e.allocated(t, h.s3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	fullDelta, err := e.delta(t, h.s1, h.s3, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	mid := full.extents[1].Offset + full.extents[1].Length/2
	for _, start := range []int64{
		1,                                 // inside the first extent
		mid,                               // inside a later one
		full.extents[2].Offset,            // at an extent's start
		full.extents[2].End(),             // in a gap, right after one
		int64(h.img.size) - 1,             // the last byte
		fullDelta.extents[3].Offset + 100, // inside a delta extent
		fullDelta.extents[len(fullDelta.extents)-1].End() - 1, // the last delta byte
	} {
		for _, c := range []struct {
			name string
			full stream
			run  func() (stream, error)
		}{
			{"allocated", full, func() (stream, error) { return e.allocated(t, h.s3, start, 0) }},
			{"delta", fullDelta, func() (stream, error) { return e.delta(t, h.s1, h.s3, start, 0) }},
		} {
			got, err := c.run()
			if err != nil {
				t.Fatalf("%s from %d: %v", c.name, start, err)
			}
			checkWellFormed(t, got, int64(h.img.size), Variable, start, DefaultMaxResults)
			// extents reaching past the offset are clipped to it, so what was received
			// before the interruption plus the resumed stream is the full stream
			want := clip(c.full.extents, start)
			if !reflect.DeepEqual(got.extents, want) && !(len(got.extents) == 0 && len(want) == 0) {
				t.Errorf("%s from %d:\n got %v\nwant %v", c.name, start, got.extents, want)
			}
			var union []Extent
			for _, x := range c.full.extents {
				if x.Offset < start {
					union = appendCoalesced(union, Extent{x.Offset, min(x.End(), start) - x.Offset})
				}
			}
			for _, x := range got.extents {
				union = appendCoalesced(union, x)
			}
			if !reflect.DeepEqual(union, c.full.extents) {
				t.Errorf("%s: received-before ∪ resumed-from-%d ≠ one full stream:\n got %v\nwant %v", c.name, start, union, c.full.extents)
			}
		}
	}
}

func TestMaxResults(t *testing.T) {
	e := newEnv(t, Options{})
	h := newHistory(t, e)
	want := e.oracle(t, h.s3, &h.s2, false)
	for _, c := range []struct {
		max     int32
		wantMax int
	}{{1, 1}, {3, 3}, {0, DefaultMaxResults}, {100000, MaxResultsCap}} {
		s, err := e.delta(t, h.s2, h.s3, 0, c.max)
		if err != nil {
			t.Fatal(err)
		}
		checkWellFormed(t, s, int64(h.img.size), Variable, 0, c.wantMax)
		if !reflect.DeepEqual(s.extents, want) {
			t.Errorf("max_results %d: extents differ from rbd diff", c.max)
		}
		if c.max > 0 && int(c.max) < len(want) && len(s.messages) < len(want)/int(c.max) {
			t.Errorf("max_results %d: %d messages for %d extents", c.max, len(s.messages), len(want))
		}
	}
}

func TestFixedLength(t *testing.T) {
	e := newEnv(t, Options{Style: Fixed})
	h := newHistory(t, e)
	const block = 4 << 20
	for _, c := range []struct {
		name  string
		start int64
		run   func(start int64) (stream, error)
		want  []Extent
	}{
		{"allocated", 0, func(s int64) (stream, error) { return e.allocated(t, h.s3, s, 2) }, e.oracle(t, h.s3, nil, false)},
		{"delta", 0, func(s int64) (stream, error) { return e.delta(t, h.s1, h.s3, s, 2) }, e.oracle(t, h.s3, &h.s1, false)},
		{"delta from the middle of a block", 20*MiB + 5, func(s int64) (stream, error) { return e.delta(t, h.s1, h.s3, s, 2) },
			clip(e.oracle(t, h.s3, &h.s1, false), 20*MiB)},
	} {
		s, err := c.run(c.start)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkWellFormed(t, s, int64(h.img.size), Fixed, c.start, 2)
		if want := blocks(c.want, block); !reflect.DeepEqual(s.extents, want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, s.extents, want)
		}
	}
}

func TestEmptyStreams(t *testing.T) {
	e := newEnv(t, Options{})
	im := e.newImage(t, 8<<20)
	s1 := im.snap(t)
	s2 := im.snap(t)
	for name, run := range map[string]func() (stream, error){
		"allocated of an empty image":   func() (stream, error) { return e.allocated(t, s1, 0, 0) },
		"delta without changes":         func() (stream, error) { return e.delta(t, s1, s2, 0, 0) },
		"delta of a snapshot to itself": func() (stream, error) { return e.delta(t, s2, s2, 0, 0) },
	} {
		s, err := run()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkWellFormed(t, s, 8<<20, Variable, 0, DefaultMaxResults)
		if len(s.extents) != 0 || len(s.messages) != 1 {
			t.Errorf("%s: %d messages, extents %v; want one empty message", name, len(s.messages), s.extents)
		}
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t, Options{})
	im := e.newImage(t, 8<<20)
	im.write(t, 0, 4*KiB, 1)
	s1 := im.snap(t)
	s2 := im.snap(t)
	other := e.newImage(t, 8<<20).snap(t)
	secrets := e.cl.Secrets()
	with := func(f func(*volid.RBDSnapshot)) string { s := s2; f(&s); return s.String() }
	missingSnap := with(func(s *volid.RBDSnapshot) { s.SnapUID = e.uid(t) })
	missingImage := with(func(s *volid.RBDSnapshot) { s.UID = e.uid(t) })
	missingPool := with(func(s *volid.RBDSnapshot) { s.PoolID = 4242 })
	missingCluster := with(func(s *volid.RBDSnapshot) { s.ClusterID = "nowhere" })
	badKey := map[string]string{"userID": "admin", "userKey": "AQBzFhFmAAAAABAAm2qnFzWSuNBRZzQ0L8hBfA=="}

	for _, c := range []struct {
		name    string
		base    string // "" for GetMetadataAllocated
		target  string
		start   int64
		max     int32
		secrets map[string]string
		want    codes.Code
	}{
		{name: "missing snapshot ID", target: "", want: codes.InvalidArgument},
		{name: "malformed snapshot ID", target: "rs1:bogus", want: codes.InvalidArgument},
		{name: "volume ID as snapshot ID", target: s1.RBDVolume.String(), want: codes.InvalidArgument},
		{name: "unknown cluster", target: missingCluster, want: codes.NotFound},
		{name: "unknown pool", target: missingPool, want: codes.NotFound},
		{name: "unknown image", target: missingImage, want: codes.NotFound},
		{name: "unknown snapshot", target: missingSnap, want: codes.NotFound},
		{name: "offset at the volume size", target: s2.String(), start: 8 << 20, want: codes.OutOfRange},
		{name: "offset past the volume size", target: s2.String(), start: 1 << 40, want: codes.OutOfRange},
		{name: "negative offset", target: s2.String(), start: -1, want: codes.OutOfRange},
		{name: "negative max_results", target: s2.String(), max: -1, want: codes.InvalidArgument},
		{name: "no secrets", target: s2.String(), secrets: map[string]string{}, want: codes.InvalidArgument},
		{name: "wrong key", target: s2.String(), secrets: badKey, want: codes.Unauthenticated},
		{name: "delta: missing base", base: "-", target: s2.String(), want: codes.InvalidArgument},
		{name: "delta: malformed base", base: "rs1:x", target: s2.String(), want: codes.InvalidArgument},
		{name: "delta: malformed target", base: s1.String(), target: "garbage", want: codes.InvalidArgument},
		{name: "delta: missing target", base: s1.String(), target: "", want: codes.InvalidArgument},
		{name: "delta: base of another volume", base: other.String(), target: s2.String(), want: codes.InvalidArgument},
		{name: "delta: base newer than target", base: s2.String(), target: s1.String(), want: codes.InvalidArgument},
		{name: "delta: unknown base", base: with(func(s *volid.RBDSnapshot) { s.SnapUID = e.uid(t) }), target: s2.String(), want: codes.NotFound},
		{name: "delta: unknown target", base: s1.String(), target: missingSnap, want: codes.NotFound},
		{name: "delta: offset out of range", base: s1.String(), target: s2.String(), start: 8 << 20, want: codes.OutOfRange},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.secrets == nil {
				c.secrets = secrets
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var err error
			if c.base == "" {
				var st grpc.ServerStreamingClient[csi.GetMetadataAllocatedResponse]
				if st, err = e.client.GetMetadataAllocated(ctx, &csi.GetMetadataAllocatedRequest{
					SnapshotId: c.target, StartingOffset: c.start, MaxResults: c.max, Secrets: c.secrets}); err == nil {
					_, err = collect(t, st.Recv)
				}
			} else {
				if c.base == "-" {
					c.base = ""
				}
				var st grpc.ServerStreamingClient[csi.GetMetadataDeltaResponse]
				if st, err = e.client.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{
					BaseSnapshotId: c.base, TargetSnapshotId: c.target, StartingOffset: c.start, MaxResults: c.max, Secrets: c.secrets}); err == nil {
					_, err = collect(t, st.Recv)
				}
			}
			if status.Code(err) != c.want {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			t.Logf("%v", err)
		})
	}
}

// TestDisconnectStopsIteration cancels a client that stopped reading in the middle of a
// stream of many extents: librbd's iteration must stop (no more extents delivered) and the
// image must be closed, not left blocked on a full queue.
func TestDisconnectStopsIteration(t *testing.T) {
	e := newEnv(t, Options{})
	base, target, n := e.manyExtents(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := e.openUnread(t, ctx, base, target)
	// wait until the producer is blocked on the full queue: deliveries stop growing
	waitStable(t, &e.engine.callbacks, 200*time.Millisecond)
	if e.engine.openImages.Load() != 1 {
		s, err := collect(t, st.Recv)
		t.Fatalf("%d images open during the stream, want 1 (callbacks %d, rest of stream: %d extents, %v)", e.engine.openImages.Load(), e.engine.callbacks.Load(), len(s.extents), err)
	}
	blocked := e.engine.callbacks.Load()
	cancel()

	waitUntil(t, time.Now().Add(10*time.Second), "the image closed after the client went away", func() bool { return e.engine.openImages.Load() == 0 })
	after := waitStable(t, &e.engine.callbacks, 500*time.Millisecond)
	t.Logf("%d extents in the image, %d delivered by librbd before the client left, %d in all", n, blocked, after)
	// after the cancel, librbd may finish the few objects in flight, but their extents stay
	// in the C batch: the iteration is told to stop at its next callback
	if after >= int64(n) || after-blocked > 1024 {
		t.Errorf("iteration did not stop: %d extents delivered when the client left, %d in the end, %d in the image", blocked, after, n)
	}
}

// manyExtents makes an image whose delta between its two snapshots has 16,384 extents: far
// more than the transport's windows, its write quota and the engine's queue hold.
func (e *env) manyExtents(t testing.TB) (base, target volid.RBDSnapshot, n int) {
	t.Helper()
	im := e.newImageOrder(t, 16<<20, 16)
	fillObjects(t, im)
	base = im.snap(t)
	n = im.writeStrided(t, 512, 512, 1024)
	return base, im.snap(t), n
}

// openUnread opens a delta stream of one extent per message on the CSI socket and reads its
// first message only. A fixed window keeps the transport from buffering the whole stream for
// a client that does not read.
func (e *env) openUnread(t testing.TB, ctx context.Context, base, target volid.RBDSnapshot) csi.SnapshotMetadata_GetMetadataDeltaClient {
	t.Helper()
	client := csi.NewSnapshotMetadataClient(e.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)))
	st, err := client.GetMetadataDelta(ctx, &csi.GetMetadataDeltaRequest{
		BaseSnapshotId: base.String(), TargetSnapshotId: target.String(), MaxResults: 1, Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitUntil polls cond until it holds, failing t at deadline.
func waitUntil(t testing.TB, deadline time.Time, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitStable waits until the counter has not moved for quiet, and returns it.
func waitStable(t *testing.T, c interface{ Load() int64 }, quiet time.Duration) int64 {
	t.Helper()
	last, since := c.Load(), time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if v := c.Load(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quiet {
			return v
		}
	}
	t.Fatalf("counter still moving after 30 s (%d)", last)
	return 0
}

// fillObjects gives every object of im its full size, writing its last byte: RADOS tracks
// overwrites byte by byte only below an object's size in the base snapshot (growing an object
// changes everything from its old end), so this is what lets small writes after a snapshot
// show up as many small extents.
func fillObjects(t testing.TB, im *image) {
	t.Helper()
	for o := im.objSize; o <= int64(im.size); o += im.objSize {
		im.write(t, o-1, 1, 1)
	}
}
