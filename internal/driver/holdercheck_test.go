package driver

import (
	"testing"

	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
