package ceph_test

import (
	"context"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// BenchmarkPooledCall measures what an RPC pays to reach Ceph through the pool (Get, one
// deadline-bounded RADOS stat, Release) against the floor measured in the same run: the same
// stat on a connection already open in hand. It also reports the cost of dialling a fresh
// connection per call, which is what the pool saves.
func BenchmarkPooledCall(b *testing.B) {
	cl := cephtest.Env(b)
	ctx := context.Background()
	p := ceph.NewPool(ceph.PoolOptions{IdleTTL: time.Minute})
	defer p.Close()
	raw, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Release()
	ioctx, err := raw.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		b.Fatal(err)
	}
	defer ioctx.Destroy()
	const obj = "monoceph-bench-object"
	if err := ioctx.WriteFull(obj, []byte("x")); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ioctx.Delete(obj) }()

	stat := func(r *rados.Conn) (rados.ObjectStat, error) {
		io, err := r.OpenIOContext(cl.RBDPool)
		if err != nil {
			return rados.ObjectStat{}, err
		}
		defer io.Destroy()
		return io.Stat(obj)
	}
	timeLoop := func(n int, f func()) time.Duration {
		start := time.Now()
		for range n {
			f()
		}
		return time.Since(start) / time.Duration(n)
	}

	const n = 2000 // fixed: `make bench` runs every benchmark once (-benchtime=1x)
	b.ResetTimer()
	floor := timeLoop(n, func() {
		if _, err := stat(raw.Rados()); err != nil {
			b.Fatal(err)
		}
	})
	pooled := timeLoop(n, func() {
		c, err := p.Get(ctx, cl.Monitors, cl.Admin)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ceph.Call(ctx, c, "stat", stat); err != nil {
			b.Fatal(err)
		}
		c.Release()
	})
	dials := n / 50 // a dial costs milliseconds; sample fewer
	dial := timeLoop(dials, func() {
		q := ceph.NewPool(ceph.PoolOptions{})
		c, err := q.Get(ctx, cl.Monitors, cl.Admin)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ceph.Call(ctx, c, "stat", stat); err != nil {
			b.Fatal(err)
		}
		c.Release()
		q.Close()
	})
	b.StopTimer()
	b.ReportMetric(float64(floor.Nanoseconds()), "floor-ns/op")
	b.ReportMetric(float64(pooled.Nanoseconds()), "pooled-ns/op")
	b.ReportMetric(float64(dial.Nanoseconds()), "dial-ns/op")
	b.ReportMetric(float64(pooled)/float64(floor), "pooled/floor")
	b.ReportMetric(float64(dial)/float64(floor), "dial/floor")
	b.Logf("RADOS stat: floor %v, pooled %v (%.2fx), dial per call %v (%.1fx)", floor, pooled, float64(pooled)/float64(floor), dial, float64(dial)/float64(floor))
}
