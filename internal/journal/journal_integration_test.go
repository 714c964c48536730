package journal_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/journal"
)

// location returns a journal in a namespace of its own, removed after the test.
func location(t *testing.T) (journal.Location, context.Context) {
	cl := cephtest.Env(t)
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	c, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	loc := journal.Location{Conn: c, Pool: cl.RBDPool, Namespace: fmt.Sprintf("jt-%d", time.Now().UnixNano())}
	t.Cleanup(func() {
		_, _ = ceph.Call(context.Background(), c, "cleanup", func(r *rados.Conn) (struct{}, error) {
			io, err := r.OpenIOContext(loc.Pool)
			if err != nil {
				return struct{}{}, err
			}
			defer io.Destroy()
			io.SetNamespace(loc.Namespace)
			return struct{}{}, io.ListObjects(func(oid string) { _ = io.Delete(oid) })
		})
	})
	return loc, ctx
}

func TestReserveLookupRelease(t *testing.T) {
	loc, ctx := location(t)
	if r, err := journal.Lookup(ctx, loc, journal.Volume, "pvc-1"); r != nil || err != nil {
		t.Fatalf("lookup before reserve = %v, %v", r, err)
	}
	r1, created, err := journal.Reserve(ctx, loc, journal.Volume, "pvc-1", map[string]string{"size": "1"})
	if err != nil || !created {
		t.Fatalf("reserve: %v %v", created, err)
	}
	r2, created, err := journal.Reserve(ctx, loc, journal.Volume, "pvc-1", map[string]string{"size": "2"})
	if err != nil || created || r2.UID != r1.UID || r2.Attrs["size"] != "1" {
		t.Fatalf("second reserve = %+v created=%v err=%v; want the first reservation", r2, created, err)
	}
	// the same name of another kind is another reservation
	s, created, err := journal.Reserve(ctx, loc, journal.Snapshot, "pvc-1", nil)
	if err != nil || !created || s.UID == r1.UID {
		t.Fatalf("snapshot reserve = %+v %v %v", s, created, err)
	}
	got, err := journal.Get(ctx, loc, journal.Volume, r1.UID)
	if err != nil || got == nil || got.Name != "pvc-1" || got.Attrs["size"] != "1" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	r1.Attrs["state"] = "created"
	if err := journal.SetAttrs(ctx, loc, journal.Volume, r1); err != nil {
		t.Fatal(err)
	}
	if got, _ := journal.Lookup(ctx, loc, journal.Volume, "pvc-1"); got.Attrs["state"] != "created" {
		t.Fatalf("attrs not updated: %+v", got)
	}
	list, err := journal.List(ctx, loc, journal.Volume)
	if err != nil || len(list) != 1 || list[0].UID != r1.UID || list[0].Name != "pvc-1" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	for range 2 { // idempotent
		if err := journal.Release(ctx, loc, journal.Volume, r1.UID); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := journal.Lookup(ctx, loc, journal.Volume, "pvc-1"); r != nil {
		t.Fatalf("lookup after release = %+v", r)
	}
	if r, _ := journal.Get(ctx, loc, journal.Volume, r1.UID); r != nil {
		t.Fatalf("get after release = %+v", r)
	}
	if err := journal.SetAttrs(ctx, loc, journal.Volume, r1); !errors.Is(err, ceph.ErrNotFound) {
		t.Fatalf("SetAttrs after release: %v", err)
	}
	// a name reserved again under a new UID is not released by the old UID
	r3, _, err := journal.Reserve(ctx, loc, journal.Volume, "pvc-1", nil)
	if err != nil || r3.UID == r1.UID {
		t.Fatalf("re-reserve: %+v %v", r3, err)
	}
	if err := journal.Release(ctx, loc, journal.Volume, r1.UID); err != nil {
		t.Fatal(err)
	}
	if err := journal.ReleaseRecord(ctx, loc, journal.Volume, r1); err != nil {
		t.Fatal(err)
	}
	if r, _ := journal.Lookup(ctx, loc, journal.Volume, "pvc-1"); r == nil || r.UID != r3.UID {
		t.Fatalf("old UID released the new reservation: %+v", r)
	}
	// ReleaseRecord removes both keys of its own reservation, and is idempotent
	for range 2 {
		if err := journal.ReleaseRecord(ctx, loc, journal.Volume, r3); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := journal.Get(ctx, loc, journal.Volume, r3.UID); r != nil {
		t.Fatalf("get after ReleaseRecord = %+v", r)
	}
	if list, _ := journal.List(ctx, loc, journal.Volume); len(list) != 0 {
		t.Fatalf("reservations left: %+v", list)
	}
}

func TestConcurrentReserveHasOneWinner(t *testing.T) {
	loc, ctx := location(t)
	const n = 32
	var wg sync.WaitGroup
	uids := make([]string, n)
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, c, err := journal.Reserve(ctx, loc, journal.Volume, "same-name", map[string]string{"caller": fmt.Sprint(i)})
			if err == nil {
				uids[i], created[i] = r.UID, c
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if uids[i] != uids[0] {
			t.Fatalf("caller %d got UID %s, caller 0 %s", i, uids[i], uids[0])
		}
		if created[i] {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d callers created the reservation, want 1", winners)
	}
	// and distinct names in the same shard all succeed despite version races
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _, err := journal.Reserve(ctx, loc, journal.Snapshot, fmt.Sprintf("snap-%d", i), nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			seen[r.UID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if list, _ := journal.List(ctx, loc, journal.Snapshot); len(list) != n || len(seen) != n {
		t.Fatalf("%d snapshots listed, %d UIDs seen, want %d", len(list), len(seen), n)
	}
}
