package reftracker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/reftracker"
)

func location(t *testing.T) (reftracker.Location, context.Context) {
	cl := cephtest.Env(t)
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	loc := reftracker.Location{Conn: c, Pool: cl.RBDPool, Namespace: fmt.Sprintf("rt-%d", time.Now().UnixNano())}
	t.Cleanup(func() {
		io, err := c.Rados().OpenIOContext(loc.Pool)
		if err == nil {
			io.SetNamespace(loc.Namespace)
			_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
			io.Destroy()
		}
	})
	return loc, ctx
}

func refs(st reftracker.State) string { return strings.Join(st.Refs, ",") }

func TestTrackerLifecycle(t *testing.T) {
	loc, ctx := location(t)
	must := func(st reftracker.State, err error) reftracker.State {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	steps := []struct {
		name string
		do   func() (reftracker.State, error)
		want string
	}{
		{"create", func() (reftracker.State, error) { return reftracker.Create(ctx, loc, "s1", "snapshot") }, "snapshot"},
		{"create again is a no-op", func() (reftracker.State, error) { return reftracker.Create(ctx, loc, "s1", "other") }, "snapshot"},
		{"add", func() (reftracker.State, error) { return reftracker.Add(ctx, loc, "s1", "volume.a") }, "snapshot,volume.a"},
		{"add twice is one reference", func() (reftracker.State, error) { return reftracker.Add(ctx, loc, "s1", "volume.a") }, "snapshot,volume.a"},
		{"add another", func() (reftracker.State, error) { return reftracker.Add(ctx, loc, "s1", "volume.b") }, "snapshot,volume.a,volume.b"},
		{"remove the snapshot's own", func() (reftracker.State, error) { return reftracker.Remove(ctx, loc, "s1", "snapshot") }, "volume.a,volume.b"},
		{"remove twice", func() (reftracker.State, error) { return reftracker.Remove(ctx, loc, "s1", "snapshot") }, "volume.a,volume.b"},
		{"remove unknown", func() (reftracker.State, error) { return reftracker.Remove(ctx, loc, "s1", "volume.zzz") }, "volume.a,volume.b"},
		{"remove a", func() (reftracker.State, error) { return reftracker.Remove(ctx, loc, "s1", "volume.a") }, "volume.b"},
		{"remove last", func() (reftracker.State, error) { return reftracker.Remove(ctx, loc, "s1", "volume.b") }, ""},
	}
	for _, s := range steps {
		if got := refs(must(s.do())); got != s.want {
			t.Fatalf("%s: refs = %q, want %q", s.name, got, s.want)
		}
	}
	// a tombstone: exists with no references and refuses new ones
	st := must(reftracker.Get(ctx, loc, "s1"))
	if !st.Exists || len(st.Refs) != 0 {
		t.Fatalf("tombstone = %+v", st)
	}
	if _, err := reftracker.Add(ctx, loc, "s1", "volume.c"); !errors.Is(err, reftracker.ErrGone) {
		t.Fatalf("add to a tombstone: %v", err)
	}
	if gone, err := reftracker.Delete(ctx, loc, "s1"); err != nil || !gone {
		t.Fatalf("delete tombstone: %v %v", gone, err)
	}
	if st := must(reftracker.Get(ctx, loc, "s1")); st.Exists {
		t.Fatal("tracker still exists")
	}
	if gone, err := reftracker.Delete(ctx, loc, "s1"); err != nil || !gone {
		t.Fatalf("delete is idempotent: %v %v", gone, err)
	}

	// legacy snapshots: the first Add creates the tracker with the snapshot's own reference
	if got := refs(must(reftracker.Add(ctx, loc, "legacy", "volume.x", "snapshot"))); got != "snapshot,volume.x" {
		t.Fatalf("legacy init = %q", got)
	}
	// Delete leaves a tracker that still holds references other than those allowed
	if gone, err := reftracker.Delete(ctx, loc, "legacy", "snapshot"); err != nil || gone {
		t.Fatalf("delete with a volume reference left: gone=%v err=%v", gone, err)
	}
	must(reftracker.Remove(ctx, loc, "legacy", "volume.x"))
	if gone, err := reftracker.Delete(ctx, loc, "legacy", "snapshot"); err != nil || !gone {
		t.Fatalf("delete with only the snapshot's reference: gone=%v err=%v", gone, err)
	}
}

func TestTrackerConcurrentWriters(t *testing.T) {
	loc, ctx := location(t)
	if _, err := reftracker.Create(ctx, loc, "c", "snapshot"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 20 {
				ref := fmt.Sprintf("volume.%d-%d", i, j)
				if _, err := reftracker.Add(ctx, loc, "c", ref); err != nil {
					t.Error(err)
					return
				}
				if j%2 == 0 {
					if _, err := reftracker.Remove(ctx, loc, "c", ref); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	st, err := reftracker.Get(ctx, loc, "c")
	if err != nil {
		t.Fatal(err) // Get checks the stored count matches the set
	}
	if len(st.Refs) != 1+16*10 {
		t.Fatalf("%d references, want %d: a concurrent update was lost", len(st.Refs), 1+16*10)
	}
}
