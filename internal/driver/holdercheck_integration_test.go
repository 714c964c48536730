package driver

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/kubecsi"
	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestHolderEventsOnAPIServer: with only the chart's grant (create on events in the default
// namespace), a node plugin's service account records the CephFSFencingDegraded event on its
// Node, one per holder instance: a second observe of the same instance sends nothing (no
// patch, which the chart does not grant, and no second event).
func TestHolderEventsOnAPIServer(t *testing.T) {
	cp := kubetest.Start(t, kubetest.Options{})
	kc := kubernetes.NewForConfigOrDie(cp.Admin)
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "storage"}}, metav1.CreateOptions{}))
	must(kc.CoreV1().ServiceAccounts("storage").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "node"}}, metav1.CreateOptions{}))
	// as charts/monoceph/templates/rbac.yaml grants it
	must(kc.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "node"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}}}, metav1.CreateOptions{}))
	must(kc.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "node"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "node"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "node", Namespace: "storage"}}}, metav1.CreateOptions{}))

	// the client reportToAPI builds from the kubeconfig, with every request it sends counted
	// (a refused patch leaves nothing on the server to see)
	cfg, err := kubecsi.Config(cp.Kubeconfig(t, cp.Token(t, "storage", "node")))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent := map[string]int{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			sent[r.Method]++
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	g := newHolderGauges(prometheus.NewRegistry())
	g.reportTo(kubernetes.NewForConfigOrDie(cfg), "cephfs.monoceph.io-node", "worker-1")
	defer g.close()
	older := func(instance string) mounter.Info {
		return mounter.Info{Version: 1, Type: "cephfs", Instance: instance, Binary: "v1"}
	}
	g.observe("cephfs", "v2", older("a"))
	g.observe("cephfs", "v2", older("a")) // the same instance again: nothing to send
	// the sink sends in order: once b's event is there, anything about a's second observe is sent
	g.observe("cephfs", "v2", older("b"))

	want := map[string]int32{"a": 1, "b": 1}
	counts := map[string]int32{}
	deadline := time.Now().Add(30 * time.Second)
	for counts["b"] == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		l, err := kc.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		counts = map[string]int32{}
		for _, e := range l.Items {
			if e.Reason != ReasonCephFSFencingDegraded || e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "worker-1" {
				t.Fatalf("event %s %s on %s %s", e.Type, e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name)
			}
			_, rest, _ := strings.Cut(e.Message, "instance ")
			instance, _, _ := strings.Cut(rest, ")")
			counts[instance] += e.Count
		}
	}
	if !maps.Equal(counts, want) {
		t.Errorf("events per holder %v, want %v", counts, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if !maps.Equal(sent, map[string]int{http.MethodPost: 2}) {
		t.Errorf("requests sent %v, want 2 POSTs (one event per holder instance) and nothing else", sent)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
