package driver

import (
	"strings"
	"sync"

	"github.com/monoceph/monoceph/internal/kubecsi"
	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// ReasonCephFSFencingDegraded is the reason of the Warning Event on the Node whose CephFS node
// plugin meets a mount holder without FeatureCephFSNode.
const ReasonCephFSFencingDegraded = "CephFSFencingDegraded"

// A node plugin and its mount holder are updated separately (the holder's DaemonSet rolls
// only when an operator lets it: restarting it remounts every FUSE volume of the node), so a
// plugin can meet an older holder. It keeps working with one, without what the holder lacks,
// and says so: a log line, these gauges, on which an operator can alert, and an Event on its
// Node, where an operator looking at the node sees it.
type holderGauges struct {
	missing  *prometheus.GaugeVec
	mismatch prometheus.Gauge

	// events records on the Node named node; nil: no Kubernetes API access (outside a pod,
	// or an RBD node plugin, which relies on no holder feature)
	events record.EventRecorder
	node   string
	stop   func() // stops the events' broadcaster

	mu       sync.Mutex // holders are observed by goroutines of their own
	reported *string    // the instance of the last holder an Event was recorded for
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
		stop: func() {},
	}
	reg.MustRegister(g.missing, g.mismatch)
	return g
}

// reportTo makes g record its Events on the Node named node through kc, as component. The
// recorder never blocks its caller (a full queue drops the event) and its sink tries an event a
// bounded number of times (client-go's record: 12, 10 s apart), so an unreachable API server
// costs the mount path nothing.
func (g *holderGauges) reportTo(kc kubernetes.Interface, component, node string) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	g.events = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component, Host: node})
	g.node, g.stop = node, b.Shutdown
}

// reportToAPI is reportTo through the API server of kubeconfig (else $KUBECONFIG, else the
// pod's service account); without one (outside Kubernetes: tests, make run) it logs that
// Events are skipped, and g keeps the log line and the gauges.
func (g *holderGauges) reportToAPI(kubeconfig, component, node string) {
	cfg, err := kubecsi.Config(kubeconfig)
	var kc kubernetes.Interface
	if err == nil {
		kc, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		klog.InfoS("No Kubernetes API access: an older mount holder is reported in the log and metrics only, not in an Event on the Node",
			"node", node, "reason", err.Error())
		return
	}
	g.reportTo(kc, component, node)
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
		g.record(self, h, missing)
	}
}

// record puts a Warning Event on the Node, once per holder met (Watch calls observe once per
// holder instance; the check here keeps it so if a caller repeats itself).
func (g *holderGauges) record(self string, h mounter.Info, missing []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reported != nil && *g.reported == h.Instance {
		return
	}
	g.reported = &h.Instance
	if g.events == nil {
		klog.InfoS("No Kubernetes API access: skipping the Event about the older mount holder", "holder", h.Instance)
		return
	}
	// the kubelet's own reference to its Node (no UID known without reading the Node; kubectl
	// describe node also finds events whose UID is the Node's name)
	ref := &corev1.ObjectReference{Kind: "Node", Name: g.node, UID: types.UID(g.node)}
	g.events.Eventf(ref, corev1.EventTypeWarning, ReasonCephFSFencingDegraded,
		"The mount holder (monoceph %s, instance %s) lacks %s, which this node plugin (monoceph %s) relies on: "+
			"out-of-service fencing finds this node's CephFS sessions by hostname only, and misses them where the hostname differs "+
			"from the Node name. Update the mount holder: delete its pod on this node (with the chart's default OnDelete nothing else updates it)",
		h.Binary, h.Instance, strings.Join(missing, ", "), self)
}

// close stops recording Events.
func (g *holderGauges) close() { g.stop() }
