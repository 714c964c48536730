package driver

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
)

// TestHolderGauges: a node plugin that meets an older holder (no features announced) says so
// in its metrics: CephFS fencing degraded, and a holder of another version.
func TestHolderGauges(t *testing.T) {
	current := mounter.Info{Version: 1, Type: "cephfs", Binary: "v2", Features: []string{mounter.FeatureCephFSNode}}
	older := mounter.Info{Version: 1, Type: "cephfs", Binary: "v1"}
	for _, c := range []struct {
		name              string
		typ               string
		h                 mounter.Info
		missing, mismatch float64
	}{
		{"the same holder", "cephfs", current, 0, 0},
		{"an older CephFS holder", "cephfs", older, 1, 1},
		{"an older RBD holder", "rbd", mounter.Info{Version: 1, Type: "rbd", Binary: "v1"}, 0, 1},
	} {
		g := newHolderGauges(prometheus.NewRegistry())
		g.observe(c.typ, "v2", c.h)
		if got := testutil.ToFloat64(g.missing.WithLabelValues(mounter.FeatureCephFSNode)); got != c.missing {
			t.Errorf("%s: feature_missing{cephfs.node} = %v, want %v", c.name, got, c.missing)
		}
		if got := testutil.ToFloat64(g.mismatch); got != c.mismatch {
			t.Errorf("%s: version_mismatch = %v, want %v", c.name, got, c.mismatch)
		}
	}
}

// TestHolderEvents: a CephFS node plugin records a Warning Event on its Node for each holder
// it meets that lacks cephfs.node (once per holder, however often it is observed), and none
// for a holder with the feature, even of another version (a version alone degrades nothing).
func TestHolderEvents(t *testing.T) {
	holder := func(instance, version string, features ...string) mounter.Info {
		return mounter.Info{Version: 1, Type: "cephfs", Instance: instance, Binary: version, Features: features}
	}
	current := func(instance string) mounter.Info { return holder(instance, "v2", mounter.FeatureCephFSNode) }
	older := func(instance string) mounter.Info { return holder(instance, "v1") }
	for _, c := range []struct {
		name    string
		typ     string
		holders []mounter.Info
		want    []string // the instances an Event names, in order
	}{
		{"a current holder", "cephfs", []mounter.Info{current("a")}, nil},
		{"an older holder", "cephfs", []mounter.Info{older("a")}, []string{"a"}},
		{"an older holder observed twice", "cephfs", []mounter.Info{older("a"), older("a")}, []string{"a"}},
		{"two older holders in turn", "cephfs", []mounter.Info{older("a"), older("b")}, []string{"a", "b"}},
		{"an older holder replaced by a current one", "cephfs", []mounter.Info{older("a"), current("b")}, []string{"a"}},
		{"a current holder replaced by an older one", "cephfs", []mounter.Info{current("a"), older("b")}, []string{"b"}},
		{"another version with the feature", "cephfs", []mounter.Info{holder("a", "v1", mounter.FeatureCephFSNode)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			kc := fake.NewClientset()
			g := newHolderGauges(prometheus.NewRegistry())
			g.reportTo(kc, "cephfs.monoceph.io-node", "worker-1")
			defer g.close()
			for _, h := range c.holders {
				g.observe(c.typ, "v2", h)
			}
			// the sink writes in order: once a last older holder's Event is there, every
			// earlier one is
			g.observe("cephfs", "v2", older("last"))
			want := append(slices.Clone(c.want), "last")
			var events []corev1.Event
			deadline := time.Now().Add(10 * time.Second)
			for len(events) < len(want) && time.Now().Before(deadline) {
				l, err := kc.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				events = l.Items
				time.Sleep(10 * time.Millisecond)
			}
			// named <node>.<creation time in hex nanoseconds>
			slices.SortFunc(events, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
			var got []string
			for _, e := range events {
				o := e.InvolvedObject
				if o.Kind != "Node" || o.Name != "worker-1" || e.Type != corev1.EventTypeWarning || e.Reason != ReasonCephFSFencingDegraded {
					t.Errorf("event on %s %q, %s %s; want a Warning %s on Node worker-1", o.Kind, o.Name, e.Type, e.Reason, ReasonCephFSFencingDegraded)
				}
				if !strings.Contains(e.Message, "monoceph v1") || !strings.Contains(e.Message, "Update the mount holder") {
					t.Errorf("event message %q: want the holder's version and what to do", e.Message)
				}
				_, rest, _ := strings.Cut(e.Message, "instance ")
				instance, _, _ := strings.Cut(rest, ")")
				// a repeated event is counted on the first (the recorder's correlator)
				for range e.Count {
					got = append(got, instance)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("events name holders %q, want %q", got, want)
			}
		})
	}
}

// TestHolderEventsWithoutAPI: without Kubernetes API access (no kubeconfig, not in a pod) no
// recorder is built, and an older holder is logged, the skipped Event included, and counted.
func TestHolderEventsWithoutAPI(t *testing.T) {
	var log bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&log)
	defer func() {
		klog.SetOutput(os.Stderr)
		klog.LogToStderr(true)
	}()
	g := newHolderGauges(prometheus.NewRegistry())
	g.reportToAPI(filepath.Join(t.TempDir(), "no-kubeconfig"), "cephfs.monoceph.io-node", "worker-1")
	defer g.close()
	if g.events != nil {
		t.Fatal("a recorder was built without API access")
	}
	g.observe("cephfs", "v2", mounter.Info{Version: 1, Type: "cephfs", Instance: "a", Binary: "v1"})
	klog.Flush()
	for _, want := range []string{"No Kubernetes API access: an older mount holder is reported in the log and metrics only",
		`No Kubernetes API access: skipping the Event about the older mount holder" holder="a"`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, log.String())
		}
	}
	if got := testutil.ToFloat64(g.missing.WithLabelValues(mounter.FeatureCephFSNode)); got != 1 {
		t.Errorf("feature_missing{cephfs.node} = %v, want 1", got)
	}
}

// TestNewFailureStopsHolderEvents: a CephFS node plugin whose New fails after its Event
// broadcaster started (here: a state directory too long for FUSE admin sockets) stops it; a
// caller retrying New would otherwise pile up broadcasters.
func TestNewFailureStopsHolderEvents(t *testing.T) {
	cfg := testConfig(t, ModeNode)
	dir := t.TempDir()
	cfg.Type, cfg.CSIAddonsEndpoint = TypeCephFS, ""
	cfg.StateDir = filepath.Join(dir, strings.Repeat("s", 120))
	cfg.MounterEndpoint = "unix://" + filepath.Join(dir, "holder.sock")
	// an API server that is never reached: the broadcaster starts without one
	cfg.SnapshotMetadata.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cfg.SnapshotMetadata.Kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("New = %v, want the state directory refused", err)
	}
	// the broadcaster's loop ends in Shutdown; earlier tests' may take a moment
	var stacks []byte
	for deadline := time.Now().Add(5 * time.Second); ; {
		stacks = make([]byte, 1<<20)
		stacks = stacks[:runtime.Stack(stacks, true)]
		if !bytes.Contains(stacks, []byte("watch.(*Broadcaster).loop")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, g := range bytes.Split(stacks, []byte("\n\n")) {
		if bytes.Contains(g, []byte("watch.(*Broadcaster).loop")) {
			t.Errorf("an event broadcaster still runs after New failed:\n%s", g)
		}
	}
}
