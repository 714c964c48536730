package inventory

import (
	"strings"
	"testing"
)

// TestWriteMetrics: one series per cluster, pool, namespace, kind and state, counting entries.
func TestWriteMetrics(t *testing.T) {
	entries := []Entry{
		{State: Orphaned, Cluster: "c", Pool: "rbd", Kind: Volume},
		{State: Orphaned, Cluster: "c", Pool: "rbd", Kind: Volume},
		{State: Bound, Cluster: "c", Pool: "rbd", Kind: Volume},
		{State: Dangling, Cluster: "c", Pool: "rbd", Namespace: "ns", Kind: Volume},
	}
	var b strings.Builder
	if err := WriteMetrics(&b, entries); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# TYPE monoceph_inventory_objects gauge",
		`monoceph_inventory_objects{cluster="c",kind="` + string(Volume) + `",namespace="",pool="rbd",state="` + string(Orphaned) + `"} 2`,
		`monoceph_inventory_objects{cluster="c",kind="` + string(Volume) + `",namespace="",pool="rbd",state="` + string(Bound) + `"} 1`,
		`monoceph_inventory_objects{cluster="c",kind="` + string(Volume) + `",namespace="ns",pool="rbd",state="` + string(Dangling) + `"} 1`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	if n := strings.Count(b.String(), "\nmonoceph_inventory_objects{"); n != 3 {
		t.Errorf("%d series, want 3:\n%s", n, b.String())
	}
}
