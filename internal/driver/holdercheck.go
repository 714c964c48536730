package driver

import (
	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// A node plugin and its mount holder are updated separately (the holder's DaemonSet rolls
// only when an operator lets it: restarting it remounts every FUSE volume of the node), so a
// plugin can meet an older holder. It keeps working with one, without what the holder lacks,
// and says so: a log line and these gauges, on which an operator can alert.
type holderGauges struct {
	missing  *prometheus.GaugeVec
	mismatch prometheus.Gauge
}

func newHolderGauges(reg prometheus.Registerer) *holderGauges {
	g := &holderGauges{
		missing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "monoceph", Name: "mount_holder_feature_missing",
			Help: "1 when the node's mount holder lacks a feature this node plugin relies on (an older holder: cephfs.node means out-of-service fencing finds this node's CephFS sessions by hostname only).",
		}, []string{"feature"}),
		mismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "monoceph", Name: "mount_holder_version_mismatch",
			Help: "1 when the node's mount holder runs another monoceph version than this node plugin (its DaemonSet was not rolled after an upgrade).",
		}),
	}
	reg.MustRegister(g.missing, g.mismatch)
	return g
}

// observe sets the gauges for holder h, met by a node plugin of type typ and version self, and
// logs what is degraded.
func (g *holderGauges) observe(typ, self string, h mounter.Info) {
	missing := h.Missing(typ)
	g.missing.Reset()
	for _, f := range missing {
		g.missing.WithLabelValues(f).Set(1)
	}
	if h.Binary != self {
		g.mismatch.Set(1)
		klog.InfoS("The mount holder runs another version than this node plugin; roll its DaemonSet to update it",
			"holderVersion", h.Binary, "pluginVersion", self)
	} else {
		g.mismatch.Set(0)
	}
	if len(missing) > 0 {
		klog.ErrorS(nil, "The mount holder is older than this node plugin: out-of-service fencing is degraded on this node "+
			"(its CephFS mounts do not announce the node, so a lost node's sessions are found by hostname only); roll the holder's DaemonSet",
			"missing", missing, "holderVersion", h.Binary, "pluginVersion", self)
	}
}
