package cephfs

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/childtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// crashOp is one RPC a child process runs until it dies at a fault point.
type crashOp struct {
	Kind   string // create, create-ro, snapshot, delete-volume, delete-snapshot, group-snapshot, delete-group-snapshot
	Name   string
	IDs    []string // source volumes, for group-snapshot
	SrcSn  string
	SrcVol string
	ID     string
	Group  string
	// CephCSI runs the op on a controller with ceph-csi's config.json as its map
	CephCSI bool
}

const crashEnv = "MONOCEPH_CEPHFS_CRASH_OP"

func (op crashOp) source() *csi.VolumeContentSource {
	switch {
	case op.SrcSn != "":
		return snapSource(op.SrcSn)
	case op.SrcVol != "":
		return volSource(op.SrcVol)
	}
	return nil
}

func (op crashOp) caps() []*csi.VolumeCapability {
	if op.Kind == "create-ro" {
		return rox
	}
	return rwx
}

// TestCrashChild is the child side of TestCrashSafety; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	raw := os.Getenv(crashEnv)
	if raw == "" {
		t.Skip("child process of TestCrashSafety only")
	}
	var op crashOp
	if err := json.Unmarshal([]byte(raw), &op); err != nil {
		t.Fatal(err)
	}
	e := newEnvIn(t, op.Group)
	ctx := ctxT(t)
	if op.CephCSI {
		cephcsiCrashChild(t, ctx, e, op)
	}
	var err error
	switch op.Kind {
	case "create", "create-ro":
		// as a CO does, repeat the request while a clone is still copying (ABORTED): under
		// load a clone can outlast the driver's bounded wait before the fault point is reached
		for {
			_, err = e.client.CreateVolume(ctx, e.createReq(op.Name, 8*mib, op.caps(), op.source()))
			if status.Code(err) != codes.Aborted || ctx.Err() != nil {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	case "snapshot":
		_, err = e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: op.Name, SourceVolumeId: op.SrcVol, Secrets: e.cl.Secrets()})
	case "delete-volume":
		_, err = e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: op.ID, Secrets: e.cl.Secrets()})
	case "delete-snapshot":
		_, err = e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: op.ID, Secrets: e.cl.Secrets()})
	case "group-snapshot":
		e.ctrl.mgr = newSquidMgr()
		_, err = e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq(op.Name, op.IDs...))
	case "delete-group-snapshot":
		e.ctrl.mgr = newSquidMgr()
		_, err = e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: op.ID, Secrets: e.cl.Secrets()})
	}
	t.Fatalf("child survived its fault point (err %v)", err)
}

func runChild(t *testing.T, op crashOp, point string) {
	t.Helper()
	b, _ := json.Marshal(op)
	childtest.RunToFaultPoint(t, "TestCrashChild", point, crashEnv+"="+string(b))
}

// TestCrashSafety kills the CephFS controller after each journal, reference-tracker and Ceph
// step of every mutating RPC; a retry of the same request must converge, and deleting what it
// made must leave no subvolume, snapshot, journal key or reference tracker.
func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	f := e.fixture(t, "")
	baseline := e.objects(t)

	check := func(t *testing.T) {
		t.Helper()
		if got := e.objects(t); len(got) != len(baseline) {
			t.Fatalf("objects = %v, want only %v", got, baseline)
		}
		if subs := e.subvolumes(t); len(subs) != 1 {
			t.Fatalf("subvolumes = %v, want only the fixture's", subs)
		}
		if !e.snapshotExists(t, f) {
			t.Fatal("the fixture's snapshot went away")
		}
	}
	deleteVolume := func(t *testing.T, id string, points ...string) {
		for _, p := range points {
			runChild(t, crashOp{Kind: "delete-volume", ID: id, Group: e.group}, p)
		}
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}

	creates := []struct {
		name   string
		op     crashOp
		points []string
		delete []string
	}{
		{"blank", crashOp{Kind: "create"}, []string{"cephfs.CreateVolume.reserved", "cephfs.CreateVolume.subvolume"}, []string{"cephfs.DeleteVolume.subvolume"}},
		{"from-snapshot", crashOp{Kind: "create", SrcSn: f.snap.GetSnapshotId()},
			[]string{"cephfs.CreateVolume.reserved", "cephfs.CreateVolume.clone-started", "cephfs.CreateVolume.subvolume"}, nil},
		{"from-volume", crashOp{Kind: "create", SrcVol: f.vol.GetVolumeId()},
			[]string{"cephfs.CreateVolume.clone-snapshot", "cephfs.CreateVolume.clone-started"}, nil},
		// shallow: journal before tracker, and tracker before the journal marks it ready
		{"shallow", crashOp{Kind: "create-ro", SrcSn: f.snap.GetSnapshotId()},
			[]string{"cephfs.CreateVolume.shallow-reserved", "cephfs.CreateVolume.shallow-referenced"},
			[]string{"cephfs.DeleteVolume.shallow-unreferenced", "cephfs.DeleteVolume.subvolume"}},
	}
	for _, c := range creates {
		for _, point := range c.points {
			t.Run(c.name+"/"+point, func(t *testing.T) {
				op := c.op
				op.Name, op.Group = "crash-"+c.name+"-"+point, e.group
				runChild(t, op, point)
				v := e.create(t, e.createReq(op.Name, 8*mib, op.caps(), op.source()))
				again := e.create(t, e.createReq(op.Name, 8*mib, op.caps(), op.source()))
				if again.GetVolumeId() != v.GetVolumeId() {
					t.Fatalf("second retry gave %s, first %s", again.GetVolumeId(), v.GetVolumeId())
				}
				if c.op.Kind == "create-ro" {
					if st := e.tracker(t, f.snapUID); len(st.Refs) != 2 {
						t.Fatalf("tracker after a resumed shallow create: %+v", st)
					}
				}
				deleteVolume(t, v.GetVolumeId(), c.delete...)
				check(t)
			})
		}
	}
	for _, point := range []string{"cephfs.CreateSnapshot.reserved", "cephfs.CreateSnapshot.cut"} {
		t.Run("snapshot/"+point, func(t *testing.T) {
			name := "crash-snap-" + point
			runChild(t, crashOp{Kind: "snapshot", Name: name, SrcVol: f.vol.GetVolumeId(), Group: e.group}, point)
			resp, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: f.vol.GetVolumeId(), Secrets: secrets})
			if err != nil || !resp.GetSnapshot().GetReadyToUse() {
				t.Fatalf("retry after kill: %+v, %v", resp, err)
			}
			runChild(t, crashOp{Kind: "delete-snapshot", ID: resp.GetSnapshot().GetSnapshotId(), Group: e.group}, "cephfs.DeleteSnapshot.unreferenced")
			runChild(t, crashOp{Kind: "delete-snapshot", ID: resp.GetSnapshot().GetSnapshotId(), Group: e.group}, "cephfs.snapshot.removed")
			if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: resp.GetSnapshot().GetSnapshotId(), Secrets: secrets}); err != nil {
				t.Fatal(err)
			}
			check(t)
		})
	}
	// the last shallow volume of a deleted snapshot: killed after the snapshot went, before
	// its tracker did
	t.Run("last-reference", func(t *testing.T) {
		sh := e.create(t, e.createReq("last", mib, rox, snapSource(f.snap.GetSnapshotId())))
		if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: f.snap.GetSnapshotId(), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
		runChild(t, crashOp{Kind: "delete-volume", ID: sh.GetVolumeId(), Group: e.group}, "cephfs.snapshot.removed")
		if e.snapshotExists(t, f) {
			t.Fatal("the child died after removing the snapshot, yet it exists")
		}
		deleteVolume(t, sh.GetVolumeId())
		if e.tracker(t, f.snapUID).Exists {
			t.Fatal("tracker orphaned")
		}
		deleteVolume(t, f.vol.GetVolumeId())
		e.assertEmpty(t)
	})
}
