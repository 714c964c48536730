package server

import (
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHTTPEndpoints(t *testing.T) {
	unhealthy := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "cluster a: monitors unreachable", http.StatusServiceUnavailable)
	})
	h, err := NewHTTP("127.0.0.1:0", prometheus.NewRegistry(), unhealthy)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.Serve() }()
	t.Cleanup(func() { h.Shutdown(0) })
	for _, c := range []struct {
		path string
		code int
	}{
		// the process lives even though Ceph does not answer
		{"/livez", http.StatusOK},
		{"/healthz", http.StatusServiceUnavailable},
		{"/metrics", http.StatusOK},
		{"/nothing", http.StatusNotFound},
	} {
		resp, err := http.Get("http://" + h.Addr() + c.path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("GET %s: %d, want %d", c.path, resp.StatusCode, c.code)
		}
	}
}
