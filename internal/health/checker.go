// Package health reports whether the Ceph clusters of the cluster map are reachable, as a
// per-cluster metric and a /healthz endpoint. It never feeds the CSI Probe: a CO restarts a
// plugin whose Probe fails, and restarting a node plugin kills its FUSE mounts, which cannot
// bring a cluster back.
package health

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/prometheus/client_golang/prometheus"
)

// Checker probes every monitor of every cluster. It is also the Prometheus collector of the
// reachability metrics: every scrape probes afresh, so /metrics never reports a stale or
// half-written result, and a node plugin (which no readiness probe calls) has them too.
type Checker struct {
	clusters func() v1.ClusterMap
	timeout  time.Duration
	probe    func(ctx context.Context, endpoint string) error
}

var (
	reachableDesc = prometheus.NewDesc("monoceph_ceph_cluster_reachable",
		"1 when at least one monitor of the cluster answered the health check, else 0.", []string{"cluster_id"}, nil)
	monitorUpDesc = prometheus.NewDesc("monoceph_ceph_monitor_up",
		"1 when the monitor answered the health check with a Ceph banner, else 0.", []string{"cluster_id", "monitor"}, nil)
)

// NewChecker builds a checker over the map clusters returns; each check takes at most timeout.
// With reg, the checker's metrics are collected there.
func NewChecker(clusters func() v1.ClusterMap, timeout time.Duration, reg prometheus.Registerer) *Checker {
	c := &Checker{clusters: clusters, timeout: timeout, probe: ceph.ProbeMonitor}
	if reg != nil {
		reg.MustRegister(c)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Checker) Describe(ch chan<- *prometheus.Desc) {
	ch <- reachableDesc
	ch <- monitorUpDesc
}

// Collect implements prometheus.Collector: one check, bounded by the checker's timeout.
func (c *Checker) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.Check(context.Background()) {
		ch <- prometheus.MustNewConstMetric(reachableDesc, prometheus.GaugeValue, b2f(st.Reachable), st.ClusterID)
		seen := map[string]bool{} // a monitor listed twice would make the whole scrape fail
		for _, m := range st.Monitors {
			if !seen[m.Monitor] {
				seen[m.Monitor] = true
				ch <- prometheus.MustNewConstMetric(monitorUpDesc, prometheus.GaugeValue, b2f(m.Up), st.ClusterID, m.Monitor)
			}
		}
	}
}

// ClusterStatus is one cluster's result.
type ClusterStatus struct {
	ClusterID string
	Reachable bool
	Errors    []string // one per monitor that did not answer
	Monitors  []MonitorStatus
}

// MonitorStatus is one monitor's result, named as the cluster map names it.
type MonitorStatus struct {
	Monitor string
	Up      bool
}

// Check probes all clusters in parallel and returns within the checker's timeout. A cluster
// counts as reachable when any of its monitors answers: a client needs only one.
func (c *Checker) Check(ctx context.Context) []ClusterStatus {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	m := c.clusters()
	out := make([]ClusterStatus, len(m))
	var wg sync.WaitGroup
	for i, cl := range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.checkCluster(ctx, cl)
		}()
	}
	wg.Wait()
	return out
}

func (c *Checker) checkCluster(ctx context.Context, cl v1.Cluster) ClusterStatus {
	st := ClusterStatus{ClusterID: cl.ClusterID, Monitors: make([]MonitorStatus, len(cl.Monitors))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, mon := range cl.Monitors {
		st.Monitors[i].Monitor = mon
		eps, err := v1.MonitorEndpoints(mon)
		if err != nil { // validated at load; kept for safety
			st.Errors = append(st.Errors, err.Error())
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var errs []string
			up := false
			for _, ep := range eps {
				if err := c.probe(ctx, ep); err != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", ep, err))
					continue
				}
				up = true
				break
			}
			st.Monitors[i].Up = up // each goroutine writes its own element
			mu.Lock()
			defer mu.Unlock()
			if up {
				st.Reachable = true
			} else {
				st.Errors = append(st.Errors, errs...)
			}
		}()
	}
	wg.Wait()
	sort.Strings(st.Errors)
	return st
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ServeHTTP answers 200 when every cluster is reachable and 503 naming the clusters that are
// not, with the monitor errors below.
func (c *Checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	results := c.Check(r.Context())
	var down []string
	var detail strings.Builder
	for _, st := range results {
		if !st.Reachable {
			down = append(down, st.ClusterID)
			fmt.Fprintf(&detail, "cluster %s: %s\n", st.ClusterID, strings.Join(st.Errors, "; "))
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(down) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "unreachable clusters: %s\n%s%s", strings.Join(down, ","), detail.String(), checked)
		return
	}
	fmt.Fprintf(w, "ok: %d clusters reachable\n%s", len(results), checked)
}

// checked tells the reader of /healthz what its answer covers, so a 200 is not taken for more.
const checked = "checked: a monitor of each cluster answers with a Ceph banner (no credentials); " +
	"not checked: quorum, OSDs, MDS, the manager, or the driver's own credentials\n"
