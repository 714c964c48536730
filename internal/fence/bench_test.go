package fence

import (
	"context"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/benchstat"
	"github.com/monoceph/monoceph/internal/blocklist"
)

// BenchmarkFenceUnfence measures FenceClusterNetwork and UnfenceClusterNetwork over the
// csi-addons socket for a /32, a /24 and a /16 (IPv4) and a /64 (IPv6), against the floor
// measured in the same run: one raw `osd blocklist range add`, and one `rm`, sent on an open
// connection. Every change of the blocklist is a monitor commit, which the monitors batch for
// paxos_propose_interval (1 s by default), so both sides take about a second; samples
// alternate add and remove so that each one is a real change. Ranges: TEST-NET-3 for the floor,
// the benchmarking block 198.18.0.0/15 and a documentation range for the rest; no client of the
// local cluster connects from them.
func BenchmarkFenceUnfence(b *testing.B) {
	const samples = 5 // fixed: `make bench` runs every benchmark once; each sample takes ~10 s
	c := newOnCluster(b, Options{})
	sizes := []struct{ name, cidr string }{
		{"v4 /32", "198.18.0.7/32"},
		{"v4 /24", "198.18.1.0/24"},
		{"v4 /16", "198.18.0.0/16"},
		{"v6 /64", "2001:db8:be::/64"},
	}
	const floorCIDR = "203.0.113.0/24"
	all := []string{floorCIDR}
	for _, s := range sizes {
		all = append(all, s.cidr)
	}
	c.cleanupEntries(b, all...)
	if err := c.unfence(b, all...); err != nil {
		b.Fatal(err)
	}
	raw := c.raw(b)
	ctx := context.Background()
	floor := rangeEntry(floorCIDR)
	timed := func(s *benchstat.Samples, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*s = append(*s, time.Since(start))
	}

	var rawAdd, rawRm, rawLs benchstat.Samples
	fences := make([]benchstat.Samples, len(sizes))
	unfences := make([]benchstat.Samples, len(sizes))
	b.ResetTimer()
	for range samples {
		timed(&rawAdd, func() error { return raw.Add(ctx, floor, blocklist.DefaultExpiry) })
		timed(&rawRm, func() error { return raw.Remove(ctx, floor) })
		timed(&rawLs, func() error { _, err := raw.List(ctx); return err })
		for i, s := range sizes {
			timed(&fences[i], func() error { return c.fence(b, s.cidr) })
			timed(&unfences[i], func() error { return c.unfence(b, s.cidr) })
		}
	}
	b.StopTimer()

	row := func(name string, s benchstat.Samples, floor *benchstat.Row) benchstat.Row {
		var wall time.Duration
		for _, d := range s {
			wall += d
		}
		return benchstat.Row{Name: name, Samples: s, Wall: wall, Floor: floor}
	}
	addFloor, rmFloor := row("raw range add", rawAdd, nil), row("raw range rm", rawRm, nil)
	rows := []benchstat.Row{addFloor, rmFloor, row("blocklist read (osd dump)", rawLs, nil)}
	for i, s := range sizes {
		rows = append(rows, row("FenceClusterNetwork "+s.name, fences[i], &addFloor), row("UnfenceClusterNetwork "+s.name, unfences[i], &rmFloor))
	}
	benchstat.Report(b, rows...)
}
