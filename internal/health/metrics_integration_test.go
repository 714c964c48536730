package health

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/server"
)

// TestMonitorGaugesOfLiveAndDeadClusterOnMetrics scrapes /metrics of the driver's HTTP server
// with the local cluster and a cluster whose only monitor is gone in the map: once after a
// readiness probe's /healthz, once more on its own, as Prometheus does.
func TestMonitorGaugesOfLiveAndDeadClusterOnMetrics(t *testing.T) {
	cl := cephtest.Env(t)
	dead := deadAddr(t)
	clusters := v1.ClusterMap{cl.ClusterMap()[0], {ClusterID: "gone", Monitors: []string{dead}}}
	reg := server.NewRegistry()
	c := NewChecker(func() v1.ClusterMap { return clusters }, 2*time.Second, reg)
	h, err := server.NewHTTP("127.0.0.1:0", reg, c)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.Serve() }()
	t.Cleanup(func() { h.Shutdown(time.Second) })

	want := []string{
		fmt.Sprintf(`monoceph_ceph_cluster_reachable{cluster_id=%q} 1`, cl.ID),
		fmt.Sprintf(`monoceph_ceph_monitor_up{cluster_id=%q,monitor=%q} 1`, cl.ID, cl.Monitors),
		`monoceph_ceph_cluster_reachable{cluster_id="gone"} 0`,
		fmt.Sprintf(`monoceph_ceph_monitor_up{cluster_id="gone",monitor=%q} 0`, dead),
	}
	resp, err := http.Get("http://" + h.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz answered %d with a cluster down", resp.StatusCode)
	}
	for scrape := range 2 {
		resp, err := http.Get("http://" + h.Addr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: %d, %v", scrape, resp.StatusCode, err)
		}
		lines := strings.Split(string(body), "\n")
		for _, w := range want {
			found := false
			for _, l := range lines {
				found = found || l == w
			}
			if !found {
				t.Errorf("scrape %d lacks %s", scrape, w)
			}
		}
		if t.Failed() {
			t.Fatalf("/metrics:\n%s", grepLines(lines, "monoceph_ceph_"))
		}
	}
}

func grepLines(lines []string, sub string) string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
