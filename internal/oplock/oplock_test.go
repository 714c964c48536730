package oplock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/monoceph/monoceph/internal/linger"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestOpLocks(t *testing.T) {
	l := New()
	unlock, err := l.TryLock("CreateVolume", "vol-1", "name-1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		keys []string
		ok   bool
	}{
		{[]string{"vol-1"}, false},
		{[]string{"name-1"}, false},
		{[]string{"vol-2", "vol-1"}, false}, // all or nothing
		{[]string{"vol-2"}, true},
	}
	for _, tt := range tests {
		u, err := l.TryLock("DeleteVolume", tt.keys...)
		if tt.ok != (err == nil) {
			t.Fatalf("TryLock(%v) err = %v, want ok=%v", tt.keys, err, tt.ok)
		}
		if err != nil {
			if status.Code(err) != codes.Aborted {
				t.Fatalf("conflict code = %v, want Aborted", status.Code(err))
			}
			continue
		}
		u()
	}
	if l.Held() != 2 {
		t.Fatalf("held = %d after failed attempts, want 2 (vol-2 must not leak)", l.Held())
	}
	unlock()
	unlock() // idempotent
	if l.Held() != 0 {
		t.Fatalf("held = %d after unlock", l.Held())
	}
	u, err := l.TryLock("x", "k", "k") // a repeated key is one lock
	if err != nil {
		t.Fatal(err)
	}
	u()
	if l.Held() != 0 {
		t.Fatal("repeated key leaked")
	}
}

func TestOpLocksMutualExclusion(t *testing.T) {
	l := New()
	var inside, maxInside, aborted atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				u, err := l.TryLock("op", "same-volume")
				if err != nil {
					aborted.Add(1)
					continue
				}
				if n := inside.Add(1); n > maxInside.Load() {
					maxInside.Store(n)
				}
				inside.Add(-1)
				u()
			}
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Fatalf("%d holders at once", maxInside.Load())
	}
	if l.Held() != 0 {
		t.Fatal("locks leaked")
	}
}

func TestTryLockContextLingers(t *testing.T) {
	l := New()
	ctx, unlock, err := l.TryLockContext(context.Background(), "DeleteVolume", "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	abandoned := linger.Hold(ctx) // a Ceph call still running after the RPC gave up
	unlock()
	unlock()
	if _, _, err := l.TryLockContext(context.Background(), "DeleteVolume", "vol-1"); status.Code(err) != codes.Aborted {
		t.Fatalf("retry while the abandoned call runs: err = %v, want Aborted", err)
	}
	abandoned()
	abandoned()
	if l.Held() != 0 {
		t.Fatalf("held = %d after the abandoned call ended, want 0", l.Held())
	}
	if _, u, err := l.TryLockContext(context.Background(), "DeleteVolume", "vol-1"); err != nil {
		t.Fatalf("retry after the abandoned call ended: %v", err)
	} else {
		u()
	}
}
