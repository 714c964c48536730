package inventory

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/owner"
)

func TestJoin(t *testing.T) {
	vol := func(h string, journaled, exists bool) Object {
		return Object{Cluster: "c", Pool: "rbd", Kind: Volume, Name: "img-" + h, Handle: h, Journaled: journaled, Exists: exists}
	}
	for _, tc := range []struct {
		name   string
		objs   []Object
		pvs    []PV
		covers func(string) bool
		want   []string // state:object:pv
	}{
		{"bound", []Object{vol("a", true, true)}, []PV{{Name: "pv-a", Handle: "a", Phase: "Bound"}}, nil, []string{"bound:img-a:pv-a"}},
		{"in use", []Object{vol("a", true, true)}, []PV{{Name: "pv-a", Handle: "a", Phase: "Bound", Attached: true}}, nil, []string{"in-use:img-a:pv-a"}},
		{"released", []Object{vol("a", true, true)}, []PV{{Name: "pv-a", Handle: "a", Phase: "Released"}}, nil, []string{"released:img-a:pv-a"}},
		{"orphaned", []Object{vol("a", true, true)}, nil, nil, []string{"orphaned:img-a:"}},
		{"dangling PV", nil, []PV{{Name: "pv-x", Handle: "x"}}, nil, []string{"dangling::pv-x"}},
		{"dangling: journal kept, image gone", []Object{vol("a", true, false)}, []PV{{Name: "pv-a", Handle: "a"}}, nil, []string{"dangling:img-a:pv-a"}},
		{"PV outside the scan is not dangling", nil, []PV{{Name: "pv-x", Handle: "x"}}, func(string) bool { return false }, nil},
		{"journal only", []Object{vol("a", true, false)}, nil, nil, []string{"journal-only:img-a:"}},
		{"unjournaled", []Object{{Pool: "rbd", Kind: Volume, Name: "img-z", Exists: true}}, nil, nil, []string{"unjournaled:img-z:"}},
		{"trashed", []Object{{Pool: "rbd", Kind: Volume, Name: "img-t", Trashed: true}}, nil, nil, []string{"trashed:img-t:"}},
		{"trashed by hand under a PV", []Object{{Pool: "rbd", Kind: Volume, Name: "img-a", Handle: "a", Journaled: true, Trashed: true}},
			[]PV{{Name: "pv-a", Handle: "a"}}, nil, []string{"trashed:img-a:pv-a"}},
		{"snapshot bound to its content", []Object{{Pool: "rbd", Kind: Snapshot, Name: "img-a@s", Handle: "s", Journaled: true, Exists: true}},
			[]PV{{Name: "snapcontent-1", Handle: "s", Snapshot: true}}, nil, []string{"bound:img-a@s:snapcontent-1"}},
		{"mixed, sorted by object", []Object{vol("b", true, true), vol("a", true, true)}, []PV{{Name: "pv-b", Handle: "b"}, {Name: "pv-y", Handle: "y"}}, nil,
			[]string{"dangling::pv-y", "orphaned:img-a:", "bound:img-b:pv-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, e := range Join(tc.objs, tc.pvs, tc.covers) {
				got = append(got, fmt.Sprintf("%s:%s:%s", e.State, e.Object, e.PV))
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDeletable(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		e    Entry
		want bool
	}{
		{"old orphan", Entry{State: Orphaned, Handle: "a", Created: now.Add(-25 * time.Hour)}, true},
		{"young orphan (a create whose PV is not written yet)", Entry{State: Orphaned, Handle: "a", Created: now.Add(-time.Hour)}, false},
		{"orphan of unknown age", Entry{State: Orphaned, Handle: "a"}, false},
		{"bound", Entry{State: Bound, Handle: "a", Created: now.Add(-48 * time.Hour)}, false},
		{"released (Retain: the PV is the operator's)", Entry{State: Released, Handle: "a", Created: now.Add(-48 * time.Hour)}, false},
		{"unjournaled", Entry{State: Unjournaled, Created: now.Add(-48 * time.Hour)}, false},
		{"old orphan of this cluster", Entry{State: Orphaned, Handle: "a", Created: now.Add(-25 * time.Hour), Owner: owner.Keys{owner.ClusterName: "kube-a"}}, true},
		{"another Kubernetes cluster's volume (no PV here)", Entry{State: Orphaned, Handle: "a", Created: now.Add(-25 * time.Hour), Owner: owner.Keys{owner.ClusterName: "kube-b"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Deletable(tc.e, now, 24*time.Hour, "kube-a"); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkJoin10k: 10,000 volumes against 10,000 PVs (half attached, a tenth orphaned, a
// tenth dangling), the size the issue asks the inventory to handle.
func BenchmarkJoin10k(b *testing.B) {
	const n = 10000
	objs := make([]Object, 0, n)
	pvs := make([]PV, 0, n)
	for i := range n {
		h := fmt.Sprintf("0001-0004-c-0000000000000002-%032x", i)
		if i%10 != 9 { // every tenth PV names an image that is gone
			objs = append(objs, Object{Cluster: "c", Pool: "rbd", Kind: Volume, Name: fmt.Sprintf("csi-vol-%032x", i), Handle: h, Journaled: true, Exists: true})
		}
		if i%10 != 0 { // every tenth image has no PV
			pvs = append(pvs, PV{Name: fmt.Sprintf("pvc-%d", i), Handle: h, Phase: "Bound", Attached: i%2 == 0})
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := Join(objs, pvs, nil); len(got) != n {
			b.Fatalf("%d entries", len(got))
		}
	}
}
