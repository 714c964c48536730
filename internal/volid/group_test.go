package volid

import (
	"errors"
	"strings"
	"testing"
)

func TestGroupSnapshotIDs(t *testing.T) {
	u1, u2 := mustUID(t, "a"), mustUID(t, "b")
	long := strings.Repeat("c", 36)
	ns := strings.Repeat("n", MaxNamespaceLen)
	for _, v := range []RBDVolume{{"local", 2, "", u1}, {long, 9999999999, ns, u1}} {
		g := RBDGroupSnapshot{ClusterID: v.ClusterID, PoolID: v.PoolID, Namespace: v.Namespace, UID: u2}
		if got, err := ParseRBDGroupSnapshot(g.String()); err != nil || got != g {
			t.Errorf("ParseRBDGroupSnapshot(%s) = %+v, %v", g, got, err)
		}
		m := g.Member(v)
		if len(m.String()) > MaxLen || !strings.HasPrefix(m.String(), "rm1:") {
			t.Errorf("member ID %s: %d bytes, want an rm1 ID of at most %d", m, len(m.String()), MaxLen)
		}
		got, err := ParseRBDSnapshot(m.String())
		if err != nil || got != m || !got.Member {
			t.Errorf("ParseRBDSnapshot(%s) = %+v, %v", m, got, err)
		}
		if back, ok := got.Group(); !ok || back != g {
			t.Errorf("member %s belongs to %+v (%v), want %+v", m, back, ok, g)
		}
		own := RBDSnapshot{RBDVolume: v, SnapUID: u2}
		if _, ok := own.Group(); ok || own.String() == m.String() {
			t.Errorf("a snapshot of its own (%s) looks like the member %s", own, m)
		}
		// the kinds never decode as each other
		if _, err := ParseRBDVolume(g.String()); err == nil {
			t.Errorf("group snapshot ID %s decoded as a volume", g)
		}
		if _, err := ParseRBDGroupSnapshot(m.String()); err == nil {
			t.Errorf("member ID %s decoded as a group snapshot", m)
		}
	}
	fg := CephFSGroupSnapshot{ClusterID: long, FSCID: 12, UID: u1}
	if got, err := ParseCephFSGroupSnapshot(fg.String()); err != nil || got != fg {
		t.Errorf("ParseCephFSGroupSnapshot(%s) = %+v, %v", fg, got, err)
	}
	if _, err := ParseCephFSVolume(fg.String()); err == nil {
		t.Errorf("CephFS group snapshot ID %s decoded as a volume", fg)
	}
}

func TestGroupSnapshotMalformed(t *testing.T) {
	u := mustUID(t, "x")
	for _, s := range []string{"", "rg1", "rg1:local:2::", "rg1:local:2::" + u + ":" + u, "rg2:local:2::" + u,
		"rv1:local:2::" + u, "rg1:local:02::" + u, "fake-group-id"} {
		if _, err := ParseRBDGroupSnapshot(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRBDGroupSnapshot(%q) = %v, want ErrMalformed", s, err)
		}
	}
	for _, s := range []string{"rm1:local:2::" + u, "rm2:local:2::" + u + ":" + u, "rm1:local:2::" + u + ":x"} {
		if _, err := ParseRBDSnapshot(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRBDSnapshot(%q) = %v, want ErrMalformed", s, err)
		}
	}
	for _, s := range []string{"fg1:local:1", "fg1:local:1:" + u + ":" + u, "fs1:local:1:" + u} {
		if _, err := ParseCephFSGroupSnapshot(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseCephFSGroupSnapshot(%q) = %v, want ErrMalformed", s, err)
		}
	}
}

func FuzzParseGroupSnapshot(f *testing.F) {
	f.Add("rg1:local:2::abcdefghijklmnop")
	f.Add("rm1:local:2::abcdefghijklmnop:qrstuvwxyz234567")
	f.Add("fg1:local:1:abcdefghijklmnop")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseRBDGroupSnapshot(s); err == nil && v.String() != s {
			t.Fatalf("group snapshot %q re-encodes as %q", s, v.String())
		}
		if v, err := ParseRBDSnapshot(s); err == nil && v.String() != s {
			t.Fatalf("snapshot %q re-encodes as %q", s, v.String())
		}
		if v, err := ParseCephFSGroupSnapshot(s); err == nil && v.String() != s {
			t.Fatalf("CephFS group snapshot %q re-encodes as %q", s, v.String())
		}
	})
}
