package cephfs

import (
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// TestGroupCrashSafety kills the controller after each step of a CephFS group snapshot (with a
// manager that has `fs quiesce`, played by squidMgr where the cluster's has not) and of its
// deletion: the retry converges on one group snapshot of two members, and deleting it leaves
// no snapshot, reservation or tracker.
func TestGroupCrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	e := newEnv(t)
	e.ctrl.mgr = newSquidMgr()
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	a := e.create(t, e.createReq("a", 8*mib, rwx, nil))
	b := e.create(t, e.createReq("b", 8*mib, rwx, nil))
	ids := []string{a.GetVolumeId(), b.GetVolumeId()}
	baseline := e.objects(t)
	for _, point := range []string{"cephfs.CreateVolumeGroupSnapshot.reserved", "cephfs.CreateVolumeGroupSnapshot.members",
		"cephfs.CreateVolumeGroupSnapshot.quiesced", "cephfs.CreateVolumeGroupSnapshot.cut"} {
		t.Run(point, func(t *testing.T) {
			name := "crash-" + point
			runChild(t, crashOp{Kind: "group-snapshot", Name: name, IDs: ids, Group: e.group}, point)
			resp, err := e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq(name, ids...))
			if err != nil || len(resp.GetGroupSnapshot().GetSnapshots()) != 2 {
				t.Fatalf("retry after kill: %+v, %v", resp, err)
			}
			// one snapshot per volume: what the killed call cut was cut again in the retry's set
			if n, m := len(e.snapshotsOf(t, a)), len(e.snapshotsOf(t, b)); n != 1 || m != 1 {
				t.Errorf("%d and %d snapshots of the volumes after the retry, want 1 each", n, m)
			}
			gs := resp.GetGroupSnapshot().GetGroupSnapshotId()
			runChild(t, crashOp{Kind: "delete-group-snapshot", ID: gs, Group: e.group}, "cephfs.DeleteVolumeGroupSnapshot.members")
			if _, err := e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs, Secrets: secrets}); err != nil {
				t.Fatal(err)
			}
			if n, m := len(e.snapshotsOf(t, a)), len(e.snapshotsOf(t, b)); n+m != 0 {
				t.Errorf("%d and %d snapshots left after the group snapshot was deleted", n, m)
			}
			if got := e.objects(t); len(got) != len(baseline) {
				t.Errorf("objects %v, want only %v", got, baseline)
			}
		})
	}
	for _, v := range []*csi.Volume{a, b} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}
