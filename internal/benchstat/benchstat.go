// Package benchstat summarises latency samples for the project's benchmarks: percentiles,
// throughput and the ratio to a floor measured in the same run.
package benchstat

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// Samples are latencies of one operation.
type Samples []time.Duration

// Percentile returns the p-th percentile (0-100) by nearest rank.
func (s Samples) Percentile(p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := append(Samples(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(float64(len(c))*p/100+0.5) - 1
	return c[max(0, min(i, len(c)-1))]
}

// Run calls op n times with the given concurrency, timing each call; wall is the elapsed time.
func Run(n, concurrency int, op func(i int) error) (s Samples, wall time.Duration, err error) {
	s = make(Samples, n)
	var mu sync.Mutex
	var first error
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t0 := time.Now()
				e := op(i)
				s[i] = time.Since(t0)
				if e != nil {
					mu.Lock()
					if first == nil {
						first = e
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return s, time.Since(start), first
}

// Row is one line of a report: an operation and the floor it is compared with.
type Row struct {
	Name    string
	Samples Samples
	Wall    time.Duration
	Floor   *Row // nil for a floor itself
}

// Report prints rows as a table with p50/p90/p99, ops/s and the p50 ratio to each row's floor,
// and reports p50s and ratios as benchmark metrics.
func Report(b *testing.B, rows ...Row) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-34s %10s %10s %10s %9s  %s\n", "operation", "p50", "p90", "p99", "ops/s", "p50 vs floor")
	for _, r := range rows {
		vs := "(floor)"
		key := strings.NewReplacer(" ", "-", "+", "", "/", "-", ":", "").Replace(r.Name)
		if r.Floor != nil {
			ratio := float64(r.Samples.Percentile(50)) / float64(r.Floor.Samples.Percentile(50))
			vs = fmt.Sprintf("%.2fx %s", ratio, r.Floor.Name)
			b.ReportMetric(ratio, key+"/floor")
		}
		fmt.Fprintf(&sb, "%-34s %10v %10v %10v %9.1f  %s\n", r.Name,
			r.Samples.Percentile(50).Round(10*time.Microsecond), r.Samples.Percentile(90).Round(10*time.Microsecond),
			r.Samples.Percentile(99).Round(10*time.Microsecond), float64(len(r.Samples))/r.Wall.Seconds(), vs)
		b.ReportMetric(float64(r.Samples.Percentile(50).Microseconds()), key+"-p50-µs")
	}
	b.Log(sb.String())
}
