package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// HTTP serves /metrics, /healthz and /livez.
type HTTP struct {
	srv *http.Server
	lis net.Listener
}

// NewHTTP listens on addr ("host:port") at once, so a port clash fails start-up.
func NewHTTP(addr string, reg *prometheus.Registry, healthz http.Handler) (*HTTP, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", healthz)
	// Liveness must not depend on Ceph: restarting a node plugin because the cluster is down
	// would kill the FUSE daemons of every mounted volume and cure nothing.
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return &HTTP{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the address actually bound (useful with port 0).
func (h *HTTP) Addr() string { return h.lis.Addr().String() }

// Serve blocks until Shutdown.
func (h *HTTP) Serve() error {
	if err := h.srv.Serve(h.lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops accepting and waits up to grace for open requests.
func (h *HTTP) Shutdown(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		klog.ErrorS(err, "HTTP server shutdown")
	}
}
