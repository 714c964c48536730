package kms

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWithKDFSlot(t *testing.T) {
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 3*MaxKDF; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = WithKDFSlot(context.Background(), func() error {
				n := in.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
				in.Add(-1)
				return nil
			})
		}()
	}
	wg.Wait()
	if most.Load() != MaxKDF {
		t.Errorf("%d ran at once, want %d", most.Load(), MaxKDF)
	}

	// all slots taken: a caller waits only as long as its context
	hold := make(chan struct{})
	var held sync.WaitGroup
	for i := 0; i < MaxKDF; i++ {
		held.Add(1)
		go func() { _ = WithKDFSlot(context.Background(), func() error { held.Done(); <-hold; return nil }) }()
	}
	held.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err := WithKDFSlot(ctx, func() error { ran = true; return nil })
	close(hold)
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Errorf("with every slot taken: err %v, ran %v; want DeadlineExceeded without running", err, ran)
	}
}
