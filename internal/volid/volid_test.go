package volid

import (
	"errors"
	"strings"
	"testing"
)

func mustUID(t testing.TB, name string) string {
	u, err := NewUID(ShardOf(name))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRoundTrip(t *testing.T) {
	u1, u2 := mustUID(t, "a"), mustUID(t, "b")
	long := strings.Repeat("c", 36)
	ns := strings.Repeat("n", MaxNamespaceLen)
	vols := []RBDVolume{
		{"local", 2, "", u1},
		{long, 9999999999, ns, u1},
		{"a.b-c_d", 0, "k8s", u2},
	}
	for _, v := range vols {
		got, err := ParseRBDVolume(v.String())
		if err != nil || got != v {
			t.Errorf("ParseRBDVolume(%s) = %+v, %v", v, got, err)
		}
		s := RBDSnapshot{RBDVolume: v, SnapUID: u2}
		if len(s.String()) > MaxLen {
			t.Errorf("snapshot ID %d bytes > %d: %s", len(s.String()), MaxLen, s)
		}
		gs, err := ParseRBDSnapshot(s.String())
		if err != nil || gs != s {
			t.Errorf("ParseRBDSnapshot(%s) = %+v, %v", s, gs, err)
		}
		if _, err := ParseRBDVolume(s.String()); err == nil {
			t.Errorf("snapshot ID %s decoded as a volume", s)
		}
	}
	fv := CephFSVolume{long, 12, u1}
	if got, err := ParseCephFSVolume(fv.String()); err != nil || got != fv {
		t.Errorf("ParseCephFSVolume = %+v, %v", got, err)
	}
	fsn := CephFSSnapshot{fv, u2}
	if got, err := ParseCephFSSnapshot(fsn.String()); err != nil || got != fsn {
		t.Errorf("ParseCephFSSnapshot = %+v, %v", got, err)
	}
}

func TestMalformed(t *testing.T) {
	u := mustUID(t, "x")
	for _, s := range []string{
		"", "rv1", "rv1:", "rv1:local:2::", "rv1:local:2:" + u, "rv1:local:-2::" + u, "rv1:local:+2::" + u,
		"rv1:local:02::" + u, "rv1:local:2::" + strings.ToUpper(u), "rv1:local:2::" + u + "x",
		"rv1:lo/cal:2::" + u, "rv1:local:2:a/b:" + u, "rv2:local:2::" + u, "rv1:local:99999999999999999999::" + u,
		"rv1:local:2::" + u + ":", "fake-vol-id", strings.Repeat("rv1:", 40),
		"rv1:local:2:" + strings.Repeat("n", 33) + ":" + u,
	} {
		if _, err := ParseRBDVolume(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRBDVolume(%q) error = %v, want ErrMalformed", s, err)
		}
	}
}

func TestNewUIDShard(t *testing.T) {
	seen := map[string]bool{}
	for i := range 1000 {
		name := strings.Repeat("p", i%7) + string(rune('a'+i%26))
		sh := ShardOf(name)
		u, err := NewUID(sh)
		if err != nil || u[0] != sh || !ValidUID(u) || seen[u] {
			t.Fatalf("NewUID(%q) = %q, %v", sh, u, err)
		}
		seen[u] = true
	}
	if _, err := NewUID('A'); err == nil {
		t.Fatal("NewUID accepted a non-alphabet shard")
	}
}

func FuzzParseRBDVolume(f *testing.F) {
	f.Add("rv1:local:2::abcdefghijklmnop")
	f.Add("rv1:local:2:ns:abcdefghijklmnop")
	f.Add("rv1::::")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRBDVolume(s)
		if err != nil {
			return
		}
		if v.String() != s {
			t.Fatalf("decoded %q but encodes as %q", s, v.String())
		}
	})
}

func FuzzParseRBDSnapshot(f *testing.F) {
	f.Add("rs1:local:2::abcdefghijklmnop:qrstuvwxyz234567")
	f.Add("rs1:a:0:b:c:d")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseRBDSnapshot(s)
		if err != nil {
			return
		}
		if v.String() != s {
			t.Fatalf("decoded %q but encodes as %q", s, v.String())
		}
	})
}

func FuzzParseCephFS(f *testing.F) {
	f.Add("fv1:local:1:abcdefghijklmnop")
	f.Add("fs1:local:1:abcdefghijklmnop:qrstuvwxyz234567")
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParseCephFSVolume(s); err == nil && v.String() != s {
			t.Fatalf("volume %q re-encodes as %q", s, v.String())
		}
		if v, err := ParseCephFSSnapshot(s); err == nil && v.String() != s {
			t.Fatalf("snapshot %q re-encodes as %q", s, v.String())
		}
	})
}
