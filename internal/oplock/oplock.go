// Package oplock is the per-key operation lock table of the CSI services (controllers and
// node services alike): a second operation on a held key answers ABORTED at once.
package oplock

import (
	"context"
	"sync"

	"github.com/monoceph/monoceph/internal/linger"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Locks serialise operations per key (a volume ID, a snapshot ID, a request name). They never
// wait: the CSI spec asks a plugin to answer ABORTED when an operation is already in progress
// for the volume, and the CO retries with backoff. Waiting instead would pile up goroutines
// behind a slow cluster.
type Locks struct {
	mu   sync.Mutex
	held map[string]string // key → operation holding it
}

// New returns an empty lock table.
func New() *Locks { return &Locks{held: map[string]string{}} }

// TryLock takes every key or none (keys may repeat). On conflict it returns an ABORTED status
// naming the operation in progress. The returned function releases the keys.
func (l *Locks) TryLock(op string, keys ...string) (unlock func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		if holder, busy := l.held[k]; busy {
			return nil, status.Errorf(codes.Aborted, "an operation (%s) on %q is already in progress", holder, k)
		}
	}
	taken := make([]string, 0, len(keys))
	for _, k := range keys {
		if _, dup := l.held[k]; !dup {
			l.held[k] = op
			taken = append(taken, k)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			for _, k := range taken {
				delete(l.held, k)
			}
			l.mu.Unlock()
		})
	}, nil
}

// TryLockContext is TryLock for an operation whose Ceph calls may outlive it: the returned
// context lets a call abandoned at the deadline keep the keys (see package linger), so they
// are free again only once the caller has unlocked and every such call has ended. A retry
// meanwhile gets ABORTED instead of racing the abandoned call.
func (l *Locks) TryLockContext(ctx context.Context, op string, keys ...string) (context.Context, func(), error) {
	unlock, err := l.TryLock(op, keys...)
	if err != nil {
		return ctx, nil, err
	}
	var mu sync.Mutex
	refs := 1
	drop := func() {
		mu.Lock()
		refs--
		last := refs == 0
		mu.Unlock()
		if last {
			unlock()
		}
	}
	hold := func() func() {
		mu.Lock()
		refs++
		mu.Unlock()
		var once sync.Once
		return func() { once.Do(drop) }
	}
	var once sync.Once
	return linger.With(ctx, hold), func() { once.Do(drop) }, nil
}

// Held reports how many keys are locked.
func (l *Locks) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}
