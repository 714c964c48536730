package server

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"
)

// Metrics are the RPC metrics every gRPC server of the process shares.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
}

// NewRegistry returns a registry with the Go runtime and process collectors, so one scrape
// shows the driver's memory and goroutines next to its RPCs.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// NewMetrics registers the RPC metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "monoceph", Name: "grpc_requests_total",
			Help: "RPCs handled, by service, method and gRPC status code.",
		}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "monoceph", Name: "grpc_request_duration_seconds",
			Help: "RPC latency, by service, method and gRPC status code.",
			// storage RPCs range from sub-millisecond (Identity) to minutes (clones, flattens)
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"service", "method", "code"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "monoceph", Name: "grpc_requests_in_flight",
			Help: "RPCs being handled now, by service and method.",
		}, []string{"service", "method"}),
	}
	reg.MustRegister(m.requests, m.latency, m.inflight)
	return m
}

// splitMethod turns "/csi.v1.Identity/Probe" into ("csi.v1.Identity", "Probe").
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndex(full, "/"); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

func (m *Metrics) begin(fullMethod string) func(codes.Code) {
	if m == nil {
		return func(codes.Code) {}
	}
	svc, method := splitMethod(fullMethod)
	start := time.Now()
	g := m.inflight.WithLabelValues(svc, method)
	g.Inc()
	return func(c codes.Code) {
		g.Dec()
		m.requests.WithLabelValues(svc, method, c.String()).Inc()
		m.latency.WithLabelValues(svc, method, c.String()).Observe(time.Since(start).Seconds())
	}
}
