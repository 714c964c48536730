package ceph_test

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
)

func newPool(t testing.TB, ttl time.Duration) *ceph.Pool {
	p := ceph.NewPool(ceph.PoolOptions{Timeouts: ceph.Timeouts{Connect: 5 * time.Second, Op: 10 * time.Second}, IdleTTL: ttl})
	t.Cleanup(p.Close)
	return p
}

func TestPoolRadosRoundTrip(t *testing.T) {
	cl := cephtest.Env(t)
	p := newPool(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	obj := fmt.Sprintf("monoceph-pool-test-%d", time.Now().UnixNano())
	payload := []byte("hello from monoceph")
	_, err = ceph.Call(ctx, c, "write", func(r *rados.Conn) (struct{}, error) {
		ioctx, err := r.OpenIOContext(cl.RBDPool)
		if err != nil {
			return struct{}{}, err
		}
		defer ioctx.Destroy()
		return struct{}{}, ioctx.WriteFull(obj, payload)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ceph.Call(ctx, c, "read", func(r *rados.Conn) ([]byte, error) {
		ioctx, err := r.OpenIOContext(cl.RBDPool)
		if err != nil {
			return nil, err
		}
		defer ioctx.Destroy()
		buf := make([]byte, 64)
		n, err := ioctx.Read(obj, buf, 0)
		if err != nil {
			return nil, err
		}
		return buf[:n], ioctx.Delete(obj)
	})
	if err != nil || string(got) != string(payload) {
		t.Fatalf("read back %q, %v; want %q", got, err, payload)
	}
	_, err = ceph.Call(ctx, c, "stat", func(r *rados.Conn) (rados.ObjectStat, error) {
		ioctx, err := r.OpenIOContext(cl.RBDPool)
		if err != nil {
			return rados.ObjectStat{}, err
		}
		defer ioctx.Destroy()
		return ioctx.Stat(obj)
	})
	if !errors.Is(err, ceph.ErrNotFound) {
		t.Fatalf("stat of deleted object: %v, want ErrNotFound", err)
	}
}

func TestPoolReusesAndExpires(t *testing.T) {
	cl := cephtest.Env(t)
	p := newPool(t, 2*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// 16 concurrent callers with the same credentials share one connection attempt.
	var wg sync.WaitGroup
	ids := make([]uint64, 16)
	errs := make([]error, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := p.Get(ctx, cl.Monitors, cl.Admin)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Release()
			ids[i] = c.Rados().GetInstanceID()
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("caller %d got instance %d, caller 0 got %d: connection not shared", i, ids[i], ids[0])
		}
	}
	if s := p.Stats(); s.Dials != 1 || s.Open != 1 || s.InUse != 0 {
		t.Fatalf("after 16 shared gets: %+v, want 1 dial, 1 open, 0 in use", s)
	}

	// A held connection is never expired, however long it sits.
	c, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rados().GetInstanceID() != ids[0] {
		t.Fatal("sequential get did not reuse the pooled connection")
	}
	time.Sleep(2500 * time.Millisecond)
	if n := p.ExpireIdle(); n != 0 {
		t.Fatalf("expired %d connections while one was held", n)
	}
	c.Release()
	c.Release() // double release must not underflow the count

	// Once idle past the TTL, the reaper (ticking every second) closes it...
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Open != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle connection not expired: %+v", p.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// ...and the next Get dials a new one.
	c, err = p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if s := p.Stats(); s.Dials != 2 || c.Rados().GetInstanceID() == ids[0] {
		t.Fatalf("after expiry: %+v, instance %d (old %d); want a second dial", s, c.Rados().GetInstanceID(), ids[0])
	}
}

func TestPoolRejectsWrongKey(t *testing.T) {
	cl := cephtest.Env(t)
	p := newPool(t, time.Minute)
	bad, err := ceph.NewCredentials(cl.Admin.ID, "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA==")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = p.Get(ctx, cl.Monitors, bad)
	if !errors.Is(err, ceph.ErrAuth) {
		t.Fatalf("wrong key: %v, want ErrAuth", err)
	}
	if s := p.Stats(); s.Open != 0 {
		t.Fatalf("failed connection kept in the pool: %+v", s)
	}
}

func TestPoolDeadMonitorIsBounded(t *testing.T) {
	cephtest.Env(t)
	admin, _ := ceph.NewCredentials("admin", "AQDrzwFrbERaOBAAIC0hFOr9eFaKm3LeRoT64w==")
	p := ceph.NewPool(ceph.PoolOptions{Timeouts: ceph.Timeouts{Connect: 2 * time.Second, Op: 2 * time.Second}})
	defer p.Close()

	// The caller's deadline wins even though librados would wait longer.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Get(ctx, "127.0.0.1:1", admin)
	if !errors.Is(err, ceph.ErrTimeout) || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("Get on a dead monitor: %v after %v, want ErrTimeout within the 500ms deadline", err, time.Since(start))
	}
	// Without a caller deadline, client_mount_timeout bounds the attempt.
	start = time.Now()
	_, err = p.Get(context.Background(), "127.0.0.1:1", admin)
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("Get on a dead monitor: %v after %v, want an error within client_mount_timeout", err, time.Since(start))
	}
}
