package snapmeta

import (
	"errors"
	"reflect"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
)

// pairs runs a diff of si from base over the whole image and returns its (offset, length)
// pairs.
func pairs(t *testing.T, si *snapImage, base fromSnap) ([]uint64, error) {
	t.Helper()
	size, err := si.size()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	err = si.diff(base, 0, size, false, func(p []uint64) int {
		out = append(out, p...)
		return 0
	})
	return out, err
}

// TestDiffBySnapshotID: where librbd has rbd_diff_iterate3 (Reef 18.2.5+, Squid 19.2.3+,
// Tentacle) deltas go by snapshot ID, and give the extents rbd_diff_iterate2 gives by name
// (and rbd diff, the oracle). The run-time detection agrees with go-ceph's (DiffIterateByID is
// ErrNotImplemented without the symbol). By ID a diff also starts from a snapshot no name
// reaches: a removed snapshot that a clone keeps in the trash namespace (as members of group
// snapshots sit in the group namespace).
func TestDiffBySnapshotID(t *testing.T) {
	e := newEnv(t, Options{})
	im := e.newImage(t, 16<<20)
	im.write(t, 0, 1<<20, 1)
	im.write(t, 9<<20, 4096, 2)
	s1 := im.snap(t)
	im.write(t, 512<<10, 8192, 3) // overwrite inside the first megabyte
	im.write(t, 12<<20, 3<<20, 4) // new objects
	im.discard(t, 9<<20, 4096)    // a hole where data was
	s2 := im.snap(t)

	open := func() *snapImage {
		si, err := openSnapImage(e.io, im.name, rbdname.Snapshot(s2.SnapUID))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = si.close() })
		return si
	}
	si := open()
	name1 := rbdname.Snapshot(s1.SnapUID)
	id1, err := si.snapID(name1)
	if err != nil {
		t.Fatal(err)
	}
	byName, err := pairs(t, si, fromSnap{name: name1})
	if err != nil {
		t.Fatal(err)
	}
	if len(byName) == 0 {
		t.Fatal("the delta by name is empty: the test wrote nothing?")
	}
	var want []uint64
	for _, x := range e.oracle(t, s2, &s1, false) {
		want = append(want, uint64(x.Offset), uint64(x.Length))
	}
	if !reflect.DeepEqual(coalesce(byName), want) {
		t.Fatalf("by name %v, rbd diff %v", coalesce(byName), want)
	}

	// go-ceph looks the symbol up its own way: both must agree
	err = im.img.DiffIterateByID(rbd.DiffIterateByIDConfig{FromSnapID: id1, Length: im.size,
		Callback: func(uint64, uint64, int, any) int { return 0 }})
	if got := !errors.Is(err, rbd.ErrNotImplemented); got != rbdcaps.Has(rbdcaps.DiffIterate3) {
		t.Fatalf("go-ceph's DiffIterateByID: %v, but rbdcaps.Has(rbdcaps.DiffIterate3) = %v", err, rbdcaps.Has(rbdcaps.DiffIterate3))
	}
	cephtest.Expect(t, rbdcaps.DiffIterate3, rbdcaps.Has(rbdcaps.DiffIterate3))
	if rbdcaps.Has(rbdcaps.DiffIterate3) {
		byID, err := pairs(t, si, fromSnap{name: name1, id: id1})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(byID, byName) {
			t.Fatalf("by ID %v, by name %v", byID, byName)
		}
	}

	// s1 removed while a clone depends on it: clone v2 keeps it in the trash namespace
	im.clone(t, s1)
	if err := im.img.GetSnapshot(name1).Remove(); err != nil {
		t.Fatal(err)
	}
	si = open()
	if _, err := pairs(t, si, fromSnap{name: name1}); !ceph.Is(err, ceph.ErrNotFound) {
		t.Fatalf("by name from a trashed snapshot: %v, want not found", err)
	}
	if !rbdcaps.Has(rbdcaps.DiffIterate3) {
		t.Log("this librbd cannot diff from a trashed snapshot (no rbd_diff_iterate3)")
		return
	}
	byID, err := pairs(t, si, fromSnap{name: name1, id: id1})
	if err != nil {
		t.Fatalf("by ID from a trashed snapshot: %v", err)
	}
	if !reflect.DeepEqual(byID, byName) {
		t.Fatalf("by ID from the trashed snapshot %v, by name before %v", byID, byName)
	}
}

// coalesce joins adjacent pairs, as the oracle's extents are.
func coalesce(p []uint64) []uint64 {
	var out []uint64
	for i := 0; i+1 < len(p); i += 2 {
		if n := len(out); n > 0 && out[n-2]+out[n-1] == p[i] {
			out[n-1] += p[i+1]
			continue
		}
		out = append(out, p[i], p[i+1])
	}
	return out
}
