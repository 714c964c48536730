package kube

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/kubetest"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartMirrorPeers: cluster.rbd.mirrorPeers, written as the README's values example,
// reaches the cluster map the driver reads, and that map resolves a volume ID of the peer to
// this cluster's pool; what the schema cannot check (a peer that is also an entry, two peer
// pools on one pool here) stops the install.
func TestChartMirrorPeers(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`cluster:
  id: site-b
  monitors: ["10.1.0.1:6789"]
  rbd:
    radosNamespace: ns
    mirrorPeers:
      - clusterID: site-a
        poolIDs: {"2": 5, "3": 7}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := helmCmd(t, append([]string{"template", "r", "charts/monoceph", "-f", values}, sets(minimal[2:]...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	var data string
	for _, o := range kubetest.Objects(t, "helm template", []byte(out)) {
		if o.GetKind() == "ConfigMap" && o.GetName() == "r-monoceph-clusters" {
			data, _, _ = unstructured.NestedString(o.Object, "data", "clusters.json")
		}
	}
	if data == "" {
		t.Fatal("no clusters.json in ConfigMap r-monoceph-clusters")
	}
	m, err := v1.ParseClusterMap([]byte(data))
	if err != nil {
		t.Fatalf("the rendered cluster map is refused by the driver: %v\n%s", err, data)
	}
	c, ok := m.LookupRBD("site-a")
	if !ok || c.ClusterID != "site-b" || c.RBD.RadosNamespace != "ns" {
		t.Fatalf("volume IDs of site-a resolve to %+v (found %v), want site-b's entry\n%s", c, ok, data)
	}
	for from, want := range map[int64]int64{2: 5, 3: 7} {
		if got, err := c.RBDPoolID(from); err != nil || got != want {
			t.Errorf("site-a's pool %d maps to %d (%v), want %d", from, got, err, want)
		}
	}
	if _, err := c.RBDPoolID(4); err == nil {
		t.Error("site-a's unmapped pool 4 resolved")
	}

	for _, c := range []struct{ name, set, wantErr string }{
		{"peer without pool IDs", "cluster.rbd.mirrorPeers[0].clusterID=a", "at '/cluster/rbd/mirrorPeers/0': missing property 'poolIDs'"},
		{"peer ID with a slash", "cluster.rbd.mirrorPeers[0].clusterID=a/b,cluster.rbd.mirrorPeers[0].poolIDs.2=5", "at '/cluster/rbd/mirrorPeers/0/clusterID'"},
		{"pool ID that is no number", "cluster.rbd.mirrorPeers[0].clusterID=a,cluster.rbd.mirrorPeers[0].poolIDs.x=5", "invalid propertyName 'x'"},
		{"negative pool ID", "cluster.rbd.mirrorPeers[0].clusterID=a,cluster.rbd.mirrorPeers[0].poolIDs.2=-1", "at '/cluster/rbd/mirrorPeers/0/poolIDs/2'"},
		{"peer that is this cluster", "cluster.rbd.mirrorPeers[0].clusterID=prod,cluster.rbd.mirrorPeers[0].poolIDs.2=5", `"prod" is an entry of the cluster map too`},
		{"peer that is another entry", "extraClusters[0].clusterID=a,extraClusters[0].monitors={m},cluster.rbd.mirrorPeers[0].clusterID=a,cluster.rbd.mirrorPeers[0].poolIDs.2=5",
			`"a" is an entry of the cluster map too`},
		{"two peer pools on one pool", "cluster.rbd.mirrorPeers[0].clusterID=a,cluster.rbd.mirrorPeers[0].poolIDs.2=5,cluster.rbd.mirrorPeers[0].poolIDs.3=5",
			`poolIDs "2" and "3" both map to pool 5`},
		{"extra cluster's peer without pool IDs", "extraClusters[0].clusterID=b,extraClusters[0].monitors={m},extraClusters[0].rbd.mirrorPeers[0].clusterID=a",
			"at '/extraClusters/0/rbd/mirrorPeers/0': missing property 'poolIDs'"},
	} {
		t.Run(c.name, func(t *testing.T) { checkRejected(t, c.set, c.wantErr) })
	}
}
