package kube

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/kubetest"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// grants is helm template of the chart (release namespace monoceph) with the minimal values
// and extra: for each ServiceAccount of the release, what its bindings grant, one line per
// rule ("<namespace, * cluster-wide> <api groups> <resources> <verbs> <resource names>").
func grants(t *testing.T, extra ...string) map[string][]string {
	t.Helper()
	out, err := helmCmd(t, append([]string{"template", "r", "charts/monoceph", "--namespace", "monoceph"}, withMinimal(extra...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string][]rbacv1.PolicyRule{} // "<kind>/<namespace>/<name>"
	var bindings []rbacv1.RoleBinding         // ClusterRoleBindings with no namespace
	for _, o := range kubetest.Objects(t, "helm template", []byte(out)) {
		var err error
		switch k := o.GetKind(); k {
		case "Role", "ClusterRole":
			var r rbacv1.Role
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r)
			rules[k+"/"+r.Namespace+"/"+r.Name] = r.Rules
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b)
			bindings = append(bindings, b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	out2 := map[string][]string{}
	for _, b := range bindings {
		ns, roleNS := b.Namespace, b.Namespace
		if ns == "" {
			ns = "*"
		}
		if b.RoleRef.Kind == "ClusterRole" {
			roleNS = ""
		}
		rs, ok := rules[b.RoleRef.Kind+"/"+roleNS+"/"+b.RoleRef.Name]
		if !ok {
			t.Fatalf("binding %s/%s names %s %s, which the chart does not make", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		for _, s := range b.Subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != "monoceph" {
				t.Fatalf("binding %s/%s: subject %+v, want a ServiceAccount of the release namespace", b.Namespace, b.Name, s)
			}
			for _, r := range rs {
				out2[s.Name] = append(out2[s.Name], fmt.Sprintf("%s %v %v %v %v", ns, r.APIGroups, r.Resources, r.Verbs, r.ResourceNames))
			}
		}
	}
	return out2
}

// TestChartNodeRBAC: the node plugins' service accounts are granted exactly what they use: with
// a mount holder the CephFS one may create events in the default namespace, where the events
// of its Node go (for its CephFSFencingDegraded event about an older holder), and nothing else,
// not even patch (one Event per holder instance); with node.holderEvents=false nothing, and its
// container gets no API token. The RBD one gets nothing, unless it reads its Node's labels.
func TestChartNodeRBAC(t *testing.T) {
	events := "default [] [events] [create] []"
	for _, c := range []struct {
		name        string
		extra       []string
		cephfs, rbd []string
	}{
		{"defaults", nil, []string{events}, nil},
		{"no mount holder", []string{"mounter.enabled=false"}, nil, nil},
		{"no holder events", []string{"node.holderEvents=false"}, nil, nil},
		{"read affinity", []string{"node.readNodeLabels=true"}, []string{events}, []string{"* [] [nodes] [get] []"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := grants(t, c.extra...)
			for sa, want := range map[string][]string{"r-monoceph-cephfs-node": c.cephfs, "r-monoceph-rbd-node": c.rbd} {
				got := g[sa]
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("%s is granted\n  %s\nwant\n  %s", sa, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
			}
			_, dss := rendered(t, c.extra...)
			ds := dss["r-monoceph-cephfs-node"]
			mounts := slices.ContainsFunc(container(t, ds.Spec.Template.Spec, "monoceph").VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "kube-api-token" })
			volume := slices.ContainsFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "kube-api-token" })
			if want := c.cephfs != nil; mounts != want || volume != want {
				t.Errorf("CephFS node plugin: API token mounted %v, volume %v; want %v (granted %v)", mounts, volume, want, c.cephfs)
			}
		})
	}
}
