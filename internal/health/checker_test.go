package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
				if got := testutil.ToFloat64(c.reachable.WithLabelValues(cl.ClusterID)); got != want {
					t.Errorf("reachable{%s} = %v, want %v", cl.ClusterID, got, want)
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
