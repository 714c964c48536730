package ceph

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/linger"
)

// TestCallDropsItsHoldBeforeAnswering: a call that ends before its caller's deadline has let go
// of the caller's operation lock by the time Call returns, so the caller's next request (a CO
// repeating a DeleteVolume to check it is idempotent) finds the lock free. The hold was once
// dropped only after the answer was handed over, and a repeated DeleteVolume was refused with
// ABORTED now and then.
func TestCallDropsItsHoldBeforeAnswering(t *testing.T) {
	p := NewPool(PoolOptions{})
	defer p.Close()
	c := &Conn{pool: p, e: &entry{ready: make(chan struct{})}}
	var holds atomic.Int32
	ctx := linger.With(context.Background(), func() func() {
		holds.Add(1)
		return func() { holds.Add(-1) }
	})
	for i := range 20000 {
		if _, err := Call(ctx, c, "noop", func(*rados.Conn) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
		if n := holds.Load(); n != 0 {
			t.Fatalf("call %d returned while still holding the caller's lock (%d holds)", i, n)
		}
	}
}
