package health

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeMon accepts connections and writes banner (nothing when banner is "").
func fakeMon(t *testing.T, banner string) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			if banner != "" {
				_, _ = c.Write([]byte(banner))
			}
			go func() { time.Sleep(5 * time.Second); c.Close() }()
		}
	}()
	return lis.Addr().String()
}

func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestHealthz(t *testing.T) {
	v1mon, v2mon := fakeMon(t, "ceph v027"), fakeMon(t, "ceph v2\n")
	httpd, silent, dead := fakeMon(t, "HTTP/1.1 400 Bad Request\r\n"), fakeMon(t, ""), deadAddr(t)
	tests := []struct {
		name     string
		clusters v1.ClusterMap
		code     int
		body     []string
	}{
		{"all up", v1.ClusterMap{{ClusterID: "a", Monitors: []string{v1mon}}, {ClusterID: "b", Monitors: []string{v2mon}}}, 200, []string{"2 clusters reachable", "checked: a monitor of each cluster", "not checked: quorum, OSDs"}},
		{"one of three monitors is enough", v1.ClusterMap{{ClusterID: "a", Monitors: []string{dead, silent, v1mon}}}, 200, nil},
		{"dead", v1.ClusterMap{{ClusterID: "a", Monitors: []string{v1mon}}, {ClusterID: "down", Monitors: []string{dead}}}, 503, []string{"unreachable clusters: down", "connection refused", "not checked: quorum, OSDs"}},
		{"not ceph", v1.ClusterMap{{ClusterID: "web", Monitors: []string{httpd}}}, 503, []string{"unreachable clusters: web", "does not speak the Ceph protocol"}},
		{"silent", v1.ClusterMap{{ClusterID: "hung", Monitors: []string{silent}}}, 503, []string{"unreachable clusters: hung"}},
		{"address vector", v1.ClusterMap{{ClusterID: "vec", Monitors: []string{"[v2:" + dead + ",v1:" + v1mon + "]"}}}, 200, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			c := NewChecker(func() v1.ClusterMap { return tt.clusters }, 300*time.Millisecond, reg)
			rec := httptest.NewRecorder()
			start := time.Now()
			c.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if el := time.Since(start); el > time.Second {
				t.Errorf("check took %v, bound is 300ms", el)
			}
			if rec.Code != tt.code {
				t.Errorf("code = %d, want %d; body %s", rec.Code, tt.code, rec.Body)
			}
			for _, want := range tt.body {
				if !strings.Contains(rec.Body.String(), want) {
					t.Errorf("body %q lacks %q", rec.Body, want)
				}
			}
			for _, cl := range tt.clusters {
				want := 1.0
				if tt.code == 503 && strings.Contains(rec.Body.String(), cl.ClusterID+"\n") {
					want = 0
				}
				key := `monoceph_ceph_cluster_reachable{cluster_id="` + cl.ClusterID + `"}`
				if got, ok := gauges(t, reg)[key]; !ok || got != want {
					t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
				}
			}
		})
	}
}

// gauges scrapes reg and returns every monoceph gauge as "name{label=\"value\",...}" → value.
func gauges(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestMetricsReportEveryMonitor scrapes the registry alone, as Prometheus does, without any
// /healthz call first: every cluster and every monitor of the map has its gauge, 1 for a
// monitor that answers with a Ceph banner and 0 for one that does not.
func TestMetricsReportEveryMonitor(t *testing.T) {
	live, silent, dead := fakeMon(t, "ceph v2\n"), fakeMon(t, ""), deadAddr(t)
	tests := []struct {
		name     string
		clusters v1.ClusterMap
		want     map[string]float64
	}{
		{"live cluster", v1.ClusterMap{{ClusterID: "live", Monitors: []string{live}}}, map[string]float64{
			`monoceph_ceph_cluster_reachable{cluster_id="live"}`:                 1,
			`monoceph_ceph_monitor_up{cluster_id="live",monitor="` + live + `"}`: 1,
		}},
		{"dead cluster", v1.ClusterMap{{ClusterID: "dead", Monitors: []string{dead, silent}}}, map[string]float64{
			`monoceph_ceph_cluster_reachable{cluster_id="dead"}`:                   0,
			`monoceph_ceph_monitor_up{cluster_id="dead",monitor="` + dead + `"}`:   0,
			`monoceph_ceph_monitor_up{cluster_id="dead",monitor="` + silent + `"}`: 0,
		}},
		{"one monitor of two down, a monitor listed twice", v1.ClusterMap{{ClusterID: "half", Monitors: []string{dead, live, live}}}, map[string]float64{
			`monoceph_ceph_cluster_reachable{cluster_id="half"}`:                 1,
			`monoceph_ceph_monitor_up{cluster_id="half",monitor="` + dead + `"}`: 0,
			`monoceph_ceph_monitor_up{cluster_id="half",monitor="` + live + `"}`: 1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			NewChecker(func() v1.ClusterMap { return tt.clusters }, 300*time.Millisecond, reg)
			for range 2 { // a second scrape reports the same, not a reset
				if got := gauges(t, reg); !maps.Equal(got, tt.want) {
					t.Fatalf("scraped\n%v\nwant\n%v", got, tt.want)
				}
			}
		})
	}
}

func TestCheckHonoursCallerContext(t *testing.T) {
	silent := fakeMon(t, "")
	c := NewChecker(func() v1.ClusterMap { return v1.ClusterMap{{ClusterID: "a", Monitors: []string{silent}}} }, time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := c.Check(ctx)
	if time.Since(start) > time.Second || res[0].Reachable {
		t.Fatalf("Check = %+v after %v", res, time.Since(start))
	}
}
