package radosop_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/radosop"
)

// TestVersionGuard is what makes cross-process writers safe: a write based on a stale read
// fails as a lost race and changes nothing; an exclusive create of an existing object too.
func TestVersionGuard(t *testing.T) {
	cl := cephtest.Env(t)
	p := ceph.NewPool(ceph.PoolOptions{})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	loc := radosop.Location{Conn: c, Pool: cl.RBDPool, Namespace: fmt.Sprintf("ro-%d", time.Now().UnixNano())}
	const oid = "guarded"
	_, err = radosop.With(ctx, loc, "test", func(io *rados.IOContext) (struct{}, error) {
		defer io.Delete(oid)
		if err := radosop.Write(io, oid, 0, radosop.Change{Set: map[string][]byte{"k": []byte("1")}}); err != nil {
			return struct{}{}, err
		}
		if err := radosop.Write(io, oid, 0, radosop.Change{Set: map[string][]byte{"k": []byte("x")}}); !radosop.Lost(err) {
			t.Errorf("exclusive create of an existing object: %v, want a lost race", err)
		}
		_, stale, err := radosop.ReadKeys(io, oid, "k")
		if err != nil {
			return struct{}{}, err
		}
		// another writer gets in between
		if err := radosop.Write(io, oid, stale, radosop.Change{Set: map[string][]byte{"k": []byte("2")}}); err != nil {
			return struct{}{}, err
		}
		if err := radosop.Write(io, oid, stale, radosop.Change{Set: map[string][]byte{"k": []byte("3")}, Rm: []string{"k"}}); !radosop.Lost(err) {
			t.Errorf("write with a stale version: %v, want a lost race", err)
		}
		vals, cur, err := radosop.ReadKeys(io, oid, "k")
		if err != nil {
			return struct{}{}, err
		}
		if string(vals["k"]) != "2" || cur == stale {
			t.Errorf("after the lost write: k=%q version %d (stale %d)", vals["k"], cur, stale)
		}
		if err := radosop.Write(io, oid, cur, radosop.Change{Delete: true}); err != nil {
			return struct{}{}, err
		}
		if _, v, _ := radosop.ReadKeys(io, oid, "k"); v != 0 {
			t.Errorf("object survived a guarded delete (version %d)", v)
		}
		return struct{}{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// the in-process lock honours the caller's deadline
	unlock, err := radosop.Lock(ctx, loc, oid)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := radosop.Lock(short, loc, oid); err == nil {
		t.Fatal("second Lock of a held object succeeded")
	}
	unlock()
	u2, err := radosop.Lock(ctx, loc, oid)
	if err != nil {
		t.Fatal(err)
	}
	u2()
}
