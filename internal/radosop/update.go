package radosop

import (
	"context"

	"github.com/ceph/go-ceph/rados"
)

// Step reads an object and decides one change: the change to write (nil: nothing to write),
// the object version the decision was made on, and the caller's result.
type Step[T any] func(io *rados.IOContext) (c *Change, ver uint64, res T, err error)

// Update is the one read-decide-write loop of every version-guarded object update: it
// serialises this process's updates of oid, runs step, writes its change only if oid is still
// at the version step read, and runs step again (after a jittered backoff) when another
// writer got there first. Past MaxAttempts it gives up with ErrConflict (the RPC answers
// ABORTED, the CO retries). A step that returns an error or no change ends the loop with its
// result.
func Update[T any](ctx context.Context, loc Location, op, oid string, step Step[T]) (T, error) {
	var zero T
	unlock, err := Lock(ctx, loc, oid)
	if err != nil {
		return zero, err
	}
	defer unlock()
	return With(ctx, loc, op, func(io *rados.IOContext) (T, error) {
		for attempt := range MaxAttempts {
			c, ver, res, err := step(io)
			if err != nil || c == nil {
				return res, err
			}
			err = Write(io, oid, ver, *c)
			if Lost(err) {
				Backoff(attempt)
				continue
			}
			if err != nil {
				return zero, err
			}
			return res, nil
		}
		return zero, ErrConflict
	})
}

// Emptied reports whether removing rm leaves no omap key in an object whose first keys (in
// key order, at least len(rm)+1 of them when there are that many) are first: then the change
// can remove the object itself, so emptied journals and trackers leave nothing behind.
func Emptied(first map[string][]byte, rm []string) bool {
	if len(first) > len(rm) {
		return false
	}
	gone := make(map[string]bool, len(rm))
	for _, k := range rm {
		gone[k] = true
	}
	for k := range first {
		if !gone[k] {
			return false
		}
	}
	return true
}
