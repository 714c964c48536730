package driver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestHolderEventsOnAPIServer: with only the chart's grant (create and patch on events in the
// default namespace), a node plugin's service account records the CephFSFencingDegraded event on
// its Node, and counts a repeated one on the first (the recorder's patch).
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
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}}}, metav1.CreateOptions{}))
	must(kc.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "node"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "node"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "node", Namespace: "storage"}}}, metav1.CreateOptions{}))

	g := newHolderGauges(prometheus.NewRegistry())
	g.reportToAPI(cp.Kubeconfig(t, cp.Token(t, "storage", "node")), "cephfs.monoceph.io-node", "worker-1")
	defer g.close()
	if g.events == nil {
		t.Fatal("no recorder with a kubeconfig")
	}
	older := func(instance string) mounter.Info {
		return mounter.Info{Version: 1, Type: "cephfs", Instance: instance, Binary: "v1"}
	}
	g.observe("cephfs", "v2", older("a"))
	g.observe("cephfs", "v2", older("b"))
	g.reported = nil // a process meeting holder a again: the same event, counted on the first
	g.observe("cephfs", "v2", older("a"))

	counts := map[string]int32{}
	deadline := time.Now().Add(30 * time.Second)
	for (counts["a"] != 2 || counts["b"] != 1) && time.Now().Before(deadline) {
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
	if counts["a"] != 2 || counts["b"] != 1 {
		t.Errorf("events per holder %v, want a: 2 (one event, patched), b: 1", counts)
	}
}
