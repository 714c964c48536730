// Package radosop is the compare-and-swap the journal and the reference trackers are built on:
// read an object's omap together with its version, then write only if the object is still at
// that version. Two writers can never both succeed on the same state; the loser re-reads.
package radosop

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
)

// Location is a pool and RADOS namespace reached through a pooled connection.
type Location struct {
	Conn      *ceph.Conn
	Pool      string
	Namespace string
}

// MaxAttempts bounds retries after losing a version race; past it the caller answers ABORTED
// and the CO retries later.
const MaxAttempts = 16

// ErrConflict is returned when concurrent writers kept winning.
var ErrConflict = ceph.NewError("update", ceph.ErrConflict, "lost the race against concurrent updates too often")

func (l Location) String() string {
	if l.Namespace == "" {
		return l.Pool
	}
	return l.Pool + "/" + l.Namespace
}

// With runs fn on a fresh IOContext for loc under ctx: IOContext.GetLastVersion is per
// IOContext, so every versioned operation gets its own.
func With[T any](ctx context.Context, loc Location, op string, fn func(*rados.IOContext) (T, error)) (T, error) {
	return WithConn(ctx, loc, op, func(_ *rados.Conn, io *rados.IOContext) (T, error) { return fn(io) })
}

// WithConn is With for work that also opens other pools (a clone's parent, a trashed parent).
func WithConn[T any](ctx context.Context, loc Location, op string, fn func(*rados.Conn, *rados.IOContext) (T, error)) (T, error) {
	return ceph.Call(ctx, loc.Conn, op, func(r *rados.Conn) (T, error) {
		var zero T
		io, err := r.OpenIOContext(loc.Pool)
		if err != nil {
			return zero, err
		}
		defer io.Destroy()
		io.SetNamespace(loc.Namespace)
		return fn(r, io)
	})
}

// ReadKeys reads keys of oid with the object version; version 0 means oid does not exist.
func ReadKeys(io *rados.IOContext, oid string, keys ...string) (map[string][]byte, uint64, error) {
	vals, _, ver, err := Read(io, oid, 0, keys...)
	return vals, ver, err
}

// Read reads, in one operation, the values of keys and the first n omap keys of oid in key
// order (none when n is 0), with the object version (0: oid does not exist).
func Read(io *rados.IOContext, oid string, n uint64, keys ...string) (vals, first map[string][]byte, ver uint64, err error) {
	op := rados.CreateReadOp()
	defer op.Release()
	byKeys := op.GetOmapValuesByKeys(keys)
	var head *rados.GetOmapStep
	if n > 0 {
		head = op.GetOmapValues("", "", n)
	}
	if err := op.Operate(io, oid, rados.OperationNoFlag); err != nil {
		if errors.Is(err, rados.ErrNotFound) {
			return map[string][]byte{}, map[string][]byte{}, 0, nil
		}
		return nil, nil, 0, err
	}
	if ver, err = io.GetLastVersion(); err != nil {
		return nil, nil, 0, err
	}
	vals, first = map[string][]byte{}, map[string][]byte{}
	for {
		kv, err := byKeys.Next()
		if err != nil {
			return nil, nil, 0, err
		}
		if kv == nil {
			break
		}
		vals[kv.Key] = kv.Value
	}
	for head != nil {
		kv, err := head.Next()
		if err != nil {
			return nil, nil, 0, err
		}
		if kv == nil {
			break
		}
		first[kv.Key] = kv.Value
	}
	return vals, first, ver, nil
}

// ReadAll reads every omap key of oid (up to max) with the object version; 0: no object.
func ReadAll(io *rados.IOContext, oid string, max uint64) (map[string][]byte, uint64, error) {
	op := rados.CreateReadOp()
	defer op.Release()
	step := op.GetOmapValues("", "", max)
	if err := op.Operate(io, oid, rados.OperationNoFlag); err != nil {
		if errors.Is(err, rados.ErrNotFound) {
			return map[string][]byte{}, 0, nil
		}
		return nil, 0, err
	}
	ver, err := io.GetLastVersion()
	if err != nil {
		return nil, 0, err
	}
	out := map[string][]byte{}
	for {
		kv, err := step.Next()
		if err != nil {
			return nil, 0, err
		}
		if kv == nil {
			break
		}
		out[kv.Key] = kv.Value
	}
	if step.More() {
		return nil, 0, ceph.NewError("read omap of "+oid, ceph.ErrInconsistent, "more keys than expected")
	}
	return out, ver, nil
}

// Change is one atomic update of an object.
type Change struct {
	Set    map[string][]byte
	Rm     []string
	Data   []byte            // replaces the object's data when not nil
	Xattrs map[string][]byte // extended attributes to set
	Delete bool              // remove the object itself
}

// Write applies c if oid is still at version ver; ver 0 means oid must not exist yet and is
// created.
func Write(io *rados.IOContext, oid string, ver uint64, c Change) error {
	op := rados.CreateWriteOp()
	defer op.Release()
	if ver == 0 {
		op.Create(rados.CreateExclusive)
	} else {
		op.AssertVersion(ver)
	}
	if len(c.Set) > 0 {
		op.SetOmap(c.Set)
	}
	if len(c.Rm) > 0 {
		op.RmOmapKeys(c.Rm)
	}
	for k, v := range c.Xattrs {
		op.SetXattr(k, v)
	}
	if c.Data != nil {
		op.WriteFull(c.Data)
	}
	if c.Delete {
		op.Remove()
	}
	return op.Operate(io, oid, rados.OperationNoFlag)
}

// Backoff sleeps before retry attempt n after a lost race: a random wait growing with n, so
// writers that collided spread out instead of colliding again in lockstep.
func Backoff(n int) {
	limit := time.Duration(1<<min(n, 6)) * 500 * time.Microsecond // 0.5 ms … 32 ms
	time.Sleep(time.Duration(rand.Int64N(int64(limit))))
}

// Lost reports whether err means another writer changed the object first (a failed version
// assertion, or an exclusive create of an object that appeared meanwhile).
func Lost(err error) bool {
	return ceph.Is(err, ceph.ErrConflict) || errors.Is(err, rados.ErrObjectExists)
}
