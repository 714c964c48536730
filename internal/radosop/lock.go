package radosop

import (
	"context"
	"sync"

	"github.com/monoceph/monoceph/internal/ceph"
)

// objectLocks serialise this process's updates of one object. The version check alone makes
// concurrent writers correct, but under contention (many shallow volumes of one snapshot, many
// creates in one journal shard) optimistic retries starve some writers; in-process callers
// queue instead and only other processes race through versions.
var objectLocks sync.Map // key → chan struct{} (capacity 1)

// Lock waits for the object's in-process lock or for ctx to end.
func Lock(ctx context.Context, loc Location, oid string) (unlock func(), err error) {
	key := loc.Pool + "\x00" + loc.Namespace + "\x00" + oid
	v, _ := objectLocks.LoadOrStore(key, make(chan struct{}, 1))
	ch := v.(chan struct{})
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ceph.Wrap("wait for "+oid, ctx.Err())
	}
}
