package ceph

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
)

// connFor is a connection of flavor f whose librados handle is never used: the calls below
// stand in for librados calls.
func connFor(p *Pool, f flavor) *Conn {
	e := &entry{key: "test", flavor: f, ready: make(chan struct{}), refs: 1}
	if f == mgrCommands {
		e.mgrSlots = make(chan struct{}, p.opts.MaxMgrCommands)
	}
	close(e.ready)
	return &Conn{pool: p, e: e}
}

// TestMgrCommandSlots: manager commands that the manager does not answer keep their slot
// after their callers gave up, so at most MaxMgrCommands of them run on a connection; later
// callers wait for a slot until their deadline and never start a call. Once the manager
// answers, the slots are free again.
func TestMgrCommandSlots(t *testing.T) {
	const slots = 3
	p := NewPool(PoolOptions{MaxMgrCommands: slots})
	t.Cleanup(p.Close)
	c := connFor(p, mgrCommands)
	answer := make(chan struct{})
	var running, most, started atomic.Int32
	hung := func(*rados.Conn) (int, error) {
		started.Add(1)
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-answer
		running.Add(-1)
		return 1, nil
	}
	const callers = 20
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	start := time.Now()
	for range callers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := callMgr(ctx, c, "fs subvolume ls", hung)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("callers returned after %v, want their 200 ms deadline", d)
	}
	waitedForSlot := 0
	for err := range errs {
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("caller of a hung manager: %v, want a timeout", err)
		}
		if strings.Contains(err.Error(), "manager commands this connection may run") {
			waitedForSlot++
		}
	}
	if started.Load() != slots || most.Load() != slots || waitedForSlot != callers-slots {
		t.Fatalf("%d calls started (at most %d at once), %d callers waited for a slot; want %d, %d, %d",
			started.Load(), most.Load(), waitedForSlot, slots, slots, callers-slots)
	}

	close(answer) // the manager answers the abandoned calls
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range slots + 1 {
		if v, err := callMgr(ctx, c, "fs subvolume ls", func(*rados.Conn) (int, error) { return 2, nil }); v != 2 || err != nil {
			t.Fatalf("command after the manager answered = %d, %v", v, err)
		}
	}

	// monitor commands and OSD ops are bounded by librados' own timeouts, not by slots
	if _, err := callMgr(ctx, connFor(p, general), "fs subvolume ls", hung); !errors.Is(err, ErrInvalid) {
		t.Fatalf("manager command on a general connection: %v, want ErrInvalid", err)
	}
}

// TestMgrSlotFreeBeforeAnswering: a manager command that ends while its caller waits has given
// its slot back by the time the caller has the answer, so the caller's next command on a
// connection of one slot never waits for its own previous one.
func TestMgrSlotFreeBeforeAnswering(t *testing.T) {
	p := NewPool(PoolOptions{MaxMgrCommands: 1})
	t.Cleanup(p.Close)
	c := connFor(p, mgrCommands)
	for i := range 20000 {
		if _, err := callMgr(context.Background(), c, "noop", func(*rados.Conn) (int, error) { return i, nil }); err != nil {
			t.Fatal(err)
		}
		if n := len(c.e.mgrSlots); n != 0 {
			t.Fatalf("command %d returned while still holding its slot", i)
		}
	}
}
