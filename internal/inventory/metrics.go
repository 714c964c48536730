package inventory

import (
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// WriteMetrics prints how many objects are in each state, per cluster, pool, RADOS namespace
// and kind, in Prometheus' text format: a periodic `monoceph inventory -o prometheus` into
// node_exporter's textfile directory makes orphans and dangling PVs something to alert on.
func WriteMetrics(w io.Writer, entries []Entry) error {
	reg := prometheus.NewRegistry()
	objects := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "monoceph_inventory_objects",
		Help: "Ceph objects and Kubernetes volumes monoceph's inventory found, by state (in-use, bound, released, orphaned, dangling, journal-only, unjournaled, trashed).",
	}, []string{"cluster", "pool", "namespace", "kind", "state"})
	reg.MustRegister(objects)
	for _, e := range entries {
		objects.WithLabelValues(e.Cluster, e.Pool, e.Namespace, string(e.Kind), string(e.State)).Inc()
	}
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}
