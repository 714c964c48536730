package snapmeta

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Defaults of Options.
const (
	// DefaultMaxResults is the tuples per message when the request says 0: about 16 KiB of
	// protobuf. Per-message costs (frames, syscalls, wakeups on both ends) are what a stream
	// pays on top of librbd; 1024 measured ~10 % faster than 256 through the CSI socket.
	DefaultMaxResults = 1024
	// MaxResultsCap bounds what a request may ask for, and with QueueDepth the memory one
	// stream holds (16 bytes per queued extent).
	MaxResultsCap = 4096
	// DefaultQueueDepth is how many messages wait between librbd and the gRPC stream. librbd
	// delivers extents in order from a throttle of 10 objects in flight: while its callback
	// blocks, no new object is read, so the queue must absorb the send loop's hiccups (4
	// measured ~5 % slower than 64).
	DefaultQueueDepth = 64
	// DefaultMaxConcurrentDiffs bounds librbd diff iterations running at once. Each holds an
	// open image, a thread (its callback blocks while the stream's queue is full) and up to
	// ten object reads in flight on the OSDs.
	DefaultMaxConcurrentDiffs = 8
)

// Options configure an Engine.
type Options struct {
	Clusters *clustermap.Store
	Pool     *ceph.Pool
	// Style is the block metadata type every stream uses (default Variable).
	Style Style
	// QueueDepth is the messages buffered per stream (0: DefaultQueueDepth).
	QueueDepth int
	// MaxStreamDuration bounds every stream (0: only the caller's deadline does).
	MaxStreamDuration time.Duration
	// MaxConcurrentDiffs bounds the diff iterations running at once (0:
	// DefaultMaxConcurrentDiffs); streams beyond it wait for a turn within their deadline.
	MaxConcurrentDiffs int
	// NoReadCompare refuses changed blocks between two of ceph-csi's snapshots where librbd
	// cannot diff them by snapshot ID (Ceph before Reef 18.2.5, or a flattened snapshot
	// image), instead of comparing their data (see cephcsi.go).
	NoReadCompare bool
}

// Engine computes allocated and changed extents of RBD snapshots.
type Engine struct {
	ctrl  controller.Base
	opts  Options
	diffs chan struct{} // a token per running diff iteration

	// observed by tests: extents librbd delivered to Go, images open, and the most diff
	// iterations that ran at once, over the Engine's life
	callbacks  atomic.Int64
	openImages atomic.Int64
	peakDiffs  atomic.Int64
}

// NewEngine builds an engine.
func NewEngine(o Options) *Engine {
	if o.QueueDepth <= 0 {
		o.QueueDepth = DefaultQueueDepth
	}
	if o.MaxConcurrentDiffs <= 0 {
		o.MaxConcurrentDiffs = DefaultMaxConcurrentDiffs
	}
	return &Engine{ctrl: controller.Base{Clusters: o.Clusters, Pool: o.Pool}, opts: o, diffs: make(chan struct{}, o.MaxConcurrentDiffs)}
}

// SnapshotID is a snapshot ID of either format: monoceph's (Own) or a ceph-csi handle (CSI set).
type SnapshotID = volid.Either[volid.RBDSnapshot]

// Query asks for the allocated extents of Target (Base nil) or the extents changed from Base
// to Target.
type Query struct {
	Target         SnapshotID
	Base           *SnapshotID
	StartingOffset int64
	MaxResults     int32
	Secrets        map[string]string
}

// Header is what every message of one stream carries unchanged.
type Header struct {
	Style    Style
	Capacity int64 // the volume's size at the target snapshot
	// BlockSize is the size of every extent when Style is Fixed.
	BlockSize int64
}

// ParseSnapshotID decodes a CSI snapshot ID of a request field; missing or malformed IDs are
// INVALID_ARGUMENT (the KEP's table: a string this driver never issued is a bad argument here,
// not an unknown snapshot).
func ParseSnapshotID(field, id string) (SnapshotID, error) {
	if id == "" {
		return SnapshotID{}, status.Errorf(codes.InvalidArgument, "%s is missing", field)
	}
	s, err := volid.ParseEither(id, volid.ParseRBDSnapshot)
	if err != nil {
		return SnapshotID{}, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	return s, nil
}

// errStopped is what the librbd callback returns to end the iteration early; librbd passes it
// back from rbd_diff_iterate2.
const errStopped = -int(syscall.ECANCELED)

// Stream runs q and calls send with every message's extents, in order. It returns when the
// stream is complete, send fails (the client went away) or ctx ends; in the last two cases
// the librbd iteration stops at its next callback and the image is closed shortly after.
func (e *Engine) Stream(ctx context.Context, q Query, send func(Header, []Extent) error) error {
	if err := e.check(q); err != nil {
		return err
	}
	if e.opts.MaxStreamDuration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.opts.MaxStreamDuration)
		defer cancel()
	}
	cl, err := e.ctrl.Cluster(q.Target.ClusterID(), codes.NotFound, "snapshot")
	if err != nil {
		return err
	}
	conn, err := e.ctrl.Connect(ctx, cl, q.Secrets)
	if err != nil {
		return err
	}
	defer conn.Release()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the producer when send fails
	start := time.Now()
	msgs := make(chan []Extent, e.opts.QueueDepth)
	var hdr Header // written before the first message is queued
	done := make(chan error, 1)
	go func() { done <- e.produce(ctx, conn, q, &hdr, msgs) }()

	sent := 0
	forward := func(b []Extent) error {
		sent += len(b)
		return send(hdr, b)
	}
	for {
		select {
		case b := <-msgs:
			if err := forward(b); err != nil {
				return err
			}
		case err := <-done:
			if err != nil {
				return err
			}
			for { // the producer finished: what it queued is all there is
				select {
				case b := <-msgs:
					if err := forward(b); err != nil {
						return err
					}
				default:
					klog.FromContext(ctx).V(2).Info("Snapshot metadata sent", "target", q.Target.String(),
						"extents", sent, "capacity", hdr.Capacity, "style", hdr.Style, "duration", time.Since(start))
					return nil
				}
			}
		}
	}
}

func (e *Engine) check(q Query) error {
	if q.MaxResults < 0 {
		return status.Errorf(codes.InvalidArgument, "max_results %d is negative", q.MaxResults)
	}
	if q.StartingOffset < 0 {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is negative", q.StartingOffset)
	}
	// a ceph-csi volume's snapshots are all ceph-csi handles and a monoceph volume's none, so
	// a pair of mixed formats is two volumes; two handles are compared by their journal entries
	if q.Base != nil && ((q.Base.CSI == nil) != (q.Target.CSI == nil) ||
		q.Base.CSI == nil && q.Base.Own.RBDVolume != q.Target.Own.RBDVolume ||
		q.Base.CSI != nil && (q.Base.CSI.ClusterID != q.Target.CSI.ClusterID || q.Base.CSI.LocationID != q.Target.CSI.LocationID)) {
		return status.Errorf(codes.InvalidArgument, "base snapshot %s and target snapshot %s are snapshots of different volumes",
			q.Base.String(), q.Target.String())
	}
	return nil
}

func maxResults(n int32) int {
	switch {
	case n == 0:
		return DefaultMaxResults
	case n > MaxResultsCap:
		return MaxResultsCap
	}
	return int(n)
}

// produce opens the target snapshot, validates the query against it and runs the diff
// iteration, queueing full messages on msgs. It runs under ceph.Call, so a caller that gives
// up does not wait for it; the callback notices the cancelled ctx and ends the iteration.
func (e *Engine) produce(ctx context.Context, conn *ceph.Conn, q Query, hdr *Header, msgs chan<- []Extent) error {
	if q.Target.CSI != nil {
		return e.produceCephCSI(ctx, conn, q, hdr, msgs)
	}
	image := rbdname.Image(q.Target.Own.UID)
	_, err := ceph.Call(ctx, conn, "diff "+image+" at "+q.Target.String(), func(r *rados.Conn) (struct{}, error) {
		done, err := e.turn(ctx)
		if err != nil {
			return struct{}{}, err
		}
		defer done()
		pool, err := r.GetPoolByID(q.Target.Own.PoolID)
		if err != nil {
			return struct{}{}, notFound(err, "snapshot %s does not exist (pool %d: %v)", q.Target.String(), q.Target.Own.PoolID, err)
		}
		io, err := r.OpenIOContext(pool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		io.SetNamespace(q.Target.Own.Namespace)
		img, err := openTarget(io, q.Target.Own)
		if err != nil {
			return struct{}{}, notFound(err, "snapshot %s does not exist", q.Target.String())
		}
		e.openImages.Add(1)
		defer func() {
			if err := img.close(); err != nil {
				klog.FromContext(ctx).Error(err, "Closing image failed", "image", image)
			}
			e.openImages.Add(-1)
		}()
		return struct{}{}, e.iterate(ctx, io, img, q, hdr, msgs)
	})
	return innerStatus(err)
}

// turn waits for one of the MaxConcurrentDiffs turns and returns its release. It is taken
// where the iteration runs, inside ceph.Call, so that one ceph.Call gave up on keeps its turn
// until librbd has really stopped.
func (e *Engine) turn(ctx context.Context) (func(), error) {
	select {
	case e.diffs <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for n := int64(len(e.diffs)); ; {
		if old := e.peakDiffs.Load(); n <= old || e.peakDiffs.CompareAndSwap(old, n) {
			break
		}
	}
	return func() { <-e.diffs }, nil
}

// innerStatus unwraps a status error that ceph.Call wrapped with the operation's name, so the
// client reads "snapshot … does not exist", not a status inside a status.
func innerStatus(err error) error {
	var s interface{ GRPCStatus() *status.Status }
	if errors.As(err, &s) {
		return s.GRPCStatus().Err()
	}
	return err
}

func (e *Engine) iterate(ctx context.Context, io *rados.IOContext, img *snapImage, q Query, hdr *Header, msgs chan<- []Extent) error {
	rawSize, err := img.size()
	if err != nil {
		return err
	}
	// an encrypted volume's offsets, starting_offset and capacity are the volume's, not the
	// image's: its LUKS header is no data
	win, err := volumeWindow(img, rawSize)
	if err != nil {
		return err
	}
	if q.StartingOffset >= win.size {
		return status.Errorf(codes.OutOfRange, "starting_offset %d is not below the volume size %d", q.StartingOffset, win.size)
	}
	var from fromSnap
	if q.Base != nil {
		if from, err = baseSnapshot(io, img, q.Base.Own, q.Target.Own); err != nil {
			return err
		}
	}
	unit, err := img.stripeUnit()
	if err != nil {
		return err
	}
	*hdr = Header{Style: e.opts.Style, Capacity: win.size, BlockSize: int64(unit)}

	var stopped atomic.Bool
	stop := context.AfterFunc(ctx, func() { stopped.Store(true) })
	defer stop()
	queue := func(b []Extent) error {
		select {
		case msgs <- b:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	asm := newAssembler(e.opts.Style, hdr.BlockSize, q.StartingOffset, maxResults(q.MaxResults), queue)
	var (
		mu    sync.Mutex // librbd serialises its callbacks today; this keeps us correct if not
		cbErr error
	)
	begin := uint64(win.raw(asm.start))
	// an allocated query reports data only; a delta also reports ranges that became holes
	// (discards), since they changed
	err = img.diff(from, begin, rawSize-begin, q.Base == nil, func(pairs []uint64) int {
		e.callbacks.Add(int64(len(pairs) / 2))
		if stopped.Load() {
			return errStopped
		}
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i+1 < len(pairs) && cbErr == nil; i += 2 {
			if off, n, ok := win.toVolume(int64(pairs[i]), int64(pairs[i+1])); ok {
				cbErr = asm.add(off, n)
			}
		}
		if cbErr != nil {
			return errStopped
		}
		return 0
	})
	mu.Lock()
	defer mu.Unlock()
	switch {
	case cbErr != nil && ctx.Err() != nil:
		return ctx.Err()
	case cbErr != nil:
		return status.Errorf(codes.Internal, "diff of %s: %v", q.Target.String(), cbErr)
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return err
	}
	return asm.finish()
}

// notFound turns a Ceph "not found" into NOT_FOUND with a message naming the snapshot; other
// errors pass on.
func notFound(err error, format string, a ...any) error {
	if ceph.Is(err, ceph.ErrNotFound) {
		return status.Error(codes.NotFound, fmt.Sprintf(format, a...))
	}
	return err
}
