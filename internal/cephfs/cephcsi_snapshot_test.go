package cephfs

import "testing"

// TestPlainJournalNames: names from ceph-csi's journal become paths (the root path, the
// .snap/<snapshot> directory), so only plain Ceph names pass.
func TestPlainJournalNames(t *testing.T) {
	for _, c := range []struct {
		sub, snap string
		ok        bool
	}{
		{"csi-vol-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "csi-snap-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", true},
		{"../../other-group/sub", "csi-snap-x", false},
		{"csi-vol-x", "../x", false},
		{"csi-vol-x", "", false},
		{"a/b", "csi-snap-x", false},
	} {
		if err := plainJournalNames(c.sub, c.snap); (err == nil) != c.ok {
			t.Errorf("plainJournalNames(%q, %q) = %v, want ok %v", c.sub, c.snap, err, c.ok)
		}
	}
}
