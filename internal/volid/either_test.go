package volid

import (
	"errors"
	"testing"
)

// eitherCase is one row of TestEither: parse turns in into an Either of some kind and reports
// what it holds, so rows of all four kinds share one table.
type eitherCase struct {
	name    string
	parse   func(string) (eitherView, error)
	in      string
	wantErr error // ErrMalformed or ErrNotHandle, nil when in parses
	csi     bool
	cluster string
	loc     int64
}

// eitherView is what an Either of any kind exposes.
type eitherView struct {
	str, cluster string
	loc          int64
	csi, hasCSI  bool
}

func parser[M Own](parseOwn func(string) (M, error)) func(string) (eitherView, error) {
	return func(s string) (eitherView, error) {
		e, err := ParseEither(s, parseOwn)
		if err != nil {
			return eitherView{}, err
		}
		return eitherView{e.String(), e.ClusterID(), e.Location(), e.IsCephCSI(), e.CSI != nil}, nil
	}
}

func TestEither(t *testing.T) {
	const (
		uid    = "abcdefghijklmnop"
		snap   = "qrstuvwxyz234567"
		handle = "0001-0009-rook-ceph-0000000000000002-c050fde3-2a93-4a45-900c-96bcc96c6b40"
		fsHdl  = "0001-0002-c1-0000000000000001-1a5d59f0-efa1-4e4a-8f61-262da0ad9152"
	)
	rbdVol, rbdSnap := parser(ParseRBDVolume), parser(ParseRBDSnapshot)
	fsVol, fsSnap := parser(ParseCephFSVolume), parser(ParseCephFSSnapshot)
	for _, tc := range []eitherCase{
		{"rbd volume", rbdVol, "rv1:local:2:ns:" + uid, nil, false, "local", 2},
		{"rbd volume, no namespace", rbdVol, "rv1:local:7::" + uid, nil, false, "local", 7},
		{"rbd volume handle", rbdVol, handle, nil, true, "rook-ceph", 2},
		{"rbd snapshot", rbdSnap, "rs1:c:3::" + uid + ":" + snap, nil, false, "c", 3},
		{"rbd group member", rbdSnap, "rm1:c:3::" + uid + ":" + snap, nil, false, "c", 3},
		{"rbd snapshot handle", rbdSnap, handle, nil, true, "rook-ceph", 2},
		{"cephfs volume", fsVol, "fv1:c:1:" + uid, nil, false, "c", 1},
		{"cephfs volume handle", fsVol, fsHdl, nil, true, "c1", 1},
		{"cephfs snapshot", fsSnap, "fs1:c:4:" + uid + ":" + snap, nil, false, "c", 4},
		{"cephfs snapshot handle", fsSnap, fsHdl, nil, true, "c1", 1},

		// the handle prefix decides: a broken handle is a broken handle, not a bad monoceph ID
		{"truncated handle", rbdVol, handle[:len(handle)-1], ErrNotHandle, false, "", 0},
		{"upper-case handle", fsVol, "0001-0002-c1-0000000000000001-1A5D59F0-efa1-4e4a-8f61-262da0ad9152", ErrNotHandle, false, "", 0},
		{"handle prefix only", rbdSnap, HandlePrefix, ErrNotHandle, false, "", 0},
		// and everything else is parsed as the kind's own format
		{"empty", rbdVol, "", ErrMalformed, false, "", 0},
		{"snapshot as volume", rbdVol, "rs1:c:3::" + uid + ":" + snap, ErrMalformed, false, "", 0},
		{"volume as snapshot", fsSnap, "fv1:c:1:" + uid, ErrMalformed, false, "", 0},
		{"rbd as cephfs", fsVol, "rv1:local:2:ns:" + uid, ErrMalformed, false, "", 0},
		{"bad UID", rbdVol, "rv1:local:2:ns:ABCDEFGHIJKLMNOP", ErrMalformed, false, "", 0},
		{"other version", rbdVol, "0002-0009-rook-ceph-0000000000000002-c050fde3-2a93-4a45-900c-96bcc96c6b40", ErrMalformed, false, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse(tc.in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("parse(%q) error = %v, want %v", tc.in, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tc.in, err)
			}
			if got.str != tc.in {
				t.Errorf("parse(%q).String() = %q: no round trip", tc.in, got.str)
			}
			if got.csi != tc.csi || got.hasCSI != tc.csi {
				t.Errorf("parse(%q): IsCephCSI = %v (CSI set: %v), want %v", tc.in, got.csi, got.hasCSI, tc.csi)
			}
			if got.cluster != tc.cluster || got.loc != tc.loc {
				t.Errorf("parse(%q): cluster %q location %d, want %q %d", tc.in, got.cluster, got.loc, tc.cluster, tc.loc)
			}
		})
	}
}

// TestEitherZero pins what an Either built in code (not parsed) reports: the own ID's
// fields, so a literal {Own: v} behaves like the parse of v.String().
func TestEitherZero(t *testing.T) {
	v := RBDVolume{ClusterID: "c", PoolID: 5, UID: "abcdefghijklmnop"}
	e := Either[RBDVolume]{Own: v}
	if e.IsCephCSI() || e.String() != v.String() || e.ClusterID() != "c" || e.Location() != 5 {
		t.Errorf("Either{Own: %+v} = %q cluster %q location %d csi %v", v, e, e.ClusterID(), e.Location(), e.IsCephCSI())
	}
	h := Handle{ClusterID: "c1", LocationID: 9, UUID: "c050fde3-2a93-4a45-900c-96bcc96c6b40"}
	f := Either[CephFSVolume]{CSI: &h}
	if !f.IsCephCSI() || f.String() != h.String() || f.ClusterID() != "c1" || f.Location() != 9 {
		t.Errorf("Either{CSI: %+v} = %q cluster %q location %d csi %v", h, f, f.ClusterID(), f.Location(), f.IsCephCSI())
	}
}
