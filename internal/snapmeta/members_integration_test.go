package snapmeta

import (
	"reflect"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// groupSnap cuts a group snapshot of im as the driver does (its group, the images members
// only while it is cut) and returns the member's CSI ID.
func (im *image) groupSnap(t testing.TB) volid.RBDSnapshot {
	t.Helper()
	uid := im.e.uid(t)
	group, gsnap := rbdname.Group(uid), rbdname.GroupSnapshot(uid)
	for _, step := range []func() error{
		func() error { return rbd.GroupCreate(im.e.io, group) },
		func() error { return rbd.GroupImageAdd(im.e.io, group, im.e.io, im.name) },
		func() error { return rbd.GroupSnapCreate(im.e.io, group, gsnap) },
		func() error { return rbd.GroupImageRemove(im.e.io, group, im.e.io, im.name) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = rbd.GroupRemove(im.e.io, group) })
	return volid.RBDSnapshot{RBDVolume: im.id, SnapUID: uid, Member: true}
}

// TestGroupMembers: members of group snapshots are targets like any snapshot (opened by their
// snapshot ID), and bases where librbd has rbd_diff_iterate3; where it does not, a delta from a
// member is FAILED_PRECONDITION, the spec's answer for changed block tracking that is not
// available. Each member's extents must equal those of a plain snapshot cut at the same moment
// (its twin), which rbd diff can reach.
func TestGroupMembers(t *testing.T) {
	e := newEnv(t, Options{})
	im := e.newImage(t, uint64(16*MiB))
	im.write(t, 0, 64*KiB, 1)
	s1 := im.snap(t)
	im.write(t, 5*MiB, 8*KiB, 2)
	m1, twin1 := im.groupSnap(t), im.snap(t)
	im.write(t, 9*MiB+512, 4*KiB, 3)
	im.discard(t, 0, 64*KiB)
	m2, twin2 := im.groupSnap(t), im.snap(t)

	same := func(name string, got stream, err error, want []Extent) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkWellFormed(t, got, int64(im.size), Variable, 0, DefaultMaxResults)
		if len(want) == 0 || !reflect.DeepEqual(got.extents, want) {
			t.Errorf("%s:\n got %v\nwant %v (its twin, by rbd diff)", name, got.extents, want)
		}
	}
	s, err := e.allocated(t, m1, 0, 0)
	same("allocated m1", s, err, e.oracle(t, twin1, nil, false))
	s, err = e.allocated(t, m2, 0, 0)
	same("allocated m2", s, err, e.oracle(t, twin2, nil, false))
	s, err = e.delta(t, s1, m2, 0, 0)
	same("delta s1 m2", s, err, e.oracle(t, twin2, &s1, false))

	s, err = e.delta(t, m1, m2, 0, 0)
	if rbdcaps.Has(rbdcaps.DiffIterate3) {
		same("delta m1 m2", s, err, e.oracle(t, twin2, &twin1, false))
		s, err = e.delta(t, m1, twin2, 0, 0)
		same("delta m1 twin2", s, err, e.oracle(t, twin2, &twin1, false))
	} else if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delta from a member without rbd_diff_iterate3: %v, want FAILED_PRECONDITION", err)
	}

	other := e.newImage(t, uint64(16*MiB))
	om := other.groupSnap(t)
	gone := volid.RBDSnapshot{RBDVolume: im.id, SnapUID: e.uid(t), Member: true}
	for _, c := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"target member that does not exist", errOf(e.allocated(t, gone, 0, 0)), codes.NotFound},
		{"base member that does not exist", errOf(e.delta(t, gone, m2, 0, 0)), codes.NotFound},
		{"members of two volumes", errOf(e.delta(t, om, m2, 0, 0)), codes.InvalidArgument},
		{"base taken after the target", errOf(e.delta(t, twin2, m1, 0, 0)), codes.InvalidArgument},
	} {
		if status.Code(c.err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
}

func errOf(_ stream, err error) error { return err }
