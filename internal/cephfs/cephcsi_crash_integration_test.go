package cephfs

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/volid"
)

// cephcsiCrashChild is TestCrashChild for an op on ceph-csi's objects: it runs op on a
// controller serving ceph-csi's config.json and must die at its fault point.
func cephcsiCrashChild(t *testing.T, ctx context.Context, e *env, op crashOp) {
	e.serveCephCSIMap(t)
	secrets := e.cl.Secrets()
	var err error
	switch op.Kind {
	case "create-ro":
		_, err = e.client.CreateVolume(ctx, cephcsiReq(e, op.Name, rox, snapSource(op.SrcSn)))
	case "snapshot":
		_, err = e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: op.Name, SourceVolumeId: op.SrcVol, Secrets: secrets})
	case "delete-volume":
		_, err = e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: op.ID, Secrets: secrets})
	case "delete-snapshot":
		_, err = e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: op.ID, Secrets: secrets})
	}
	t.Fatalf("child survived its fault point (err %v)", err)
}

// cephcsiReq asks for a volume of a ceph-csi StorageClass.
func cephcsiReq(e *env, name string, caps []*csi.VolumeCapability, src *csi.VolumeContentSource) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 * mib}, VolumeCapabilities: caps,
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID, "fsName": e.cl.FSName}, Secrets: e.cl.Secrets(), VolumeContentSource: src}
}

// TestCephCSICrashSafety kills the controller after each step of a snapshot of a ceph-csi
// volume (made in ceph-csi's format), of a shallow volume of a ceph-csi snapshot (a reference
// in ceph-csi's tracker) and of the deletes of ceph-csi's snapshots and volumes, the last
// reference of a deleted snapshot included; the retry must converge and at the end no
// subvolume, snapshot, journal object or tracker of either driver is left.
func TestCephCSICrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	tk := newTakeover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc := tk.cephcsi
	vol := createWith(t, cc, tk.req("pvc-crash", 16*mib, rwx, nil)).GetVolumeId()
	snap := tk.snap(t, cc, "snap-crash", vol, map[string]string{"clusterID": cephcsitest.ClusterID, "fsName": tk.cl.FSName})
	sh := createWith(t, cc, tk.req("pvc-crash-sh", 16*mib, rox, snapSource(snap), "backingSnapshot", "true")).GetVolumeId()
	tk.stop()
	// a shallow volume made and deleted: the tracker keeps only the snapshot's own reference
	first := tk.create(t, cephcsiReq(tk.env, "first", rox, snapSource(snap)))
	tk.deleteVolume(t, ctx, first.GetVolumeId())
	baseline := tk.objects(t)
	check := func(t *testing.T) {
		t.Helper()
		if got := tk.objects(t); len(got) != len(baseline) {
			t.Fatalf("objects = %v, want only %v", got, baseline)
		}
		tr, err := cephcsi.ReadTracker(ctx, tk.loc(), cephcsi.TrackerName(snap))
		if err != nil || len(tr.Refs) != 2 {
			t.Fatalf("tracker of %s = %+v, %v; want the snapshot's and ceph-csi's shallow volume's references", snap, tr, err)
		}
	}
	check(t)

	for _, point := range []string{"cephfs.CreateCephCSISnapshot.reserved", "cephfs.CreateCephCSISnapshot.cut"} {
		t.Run("snapshot/"+point, func(t *testing.T) {
			name := "crash-snap-" + point
			runChild(t, crashOp{Kind: "snapshot", Name: name, SrcVol: vol, Group: tk.group, CephCSI: true}, point)
			id := tk.snap(t, tk.client, name, vol, nil)
			if again := tk.snap(t, tk.client, name, vol, nil); again != id || !volid.IsHandle(id) {
				t.Fatalf("retries gave %s and %s", id, again)
			}
			for _, p := range []string{"cephfs.DeleteCephCSISnapshot.unreferenced", "cephfs.cephcsi-snapshot.removed"} {
				runChild(t, crashOp{Kind: "delete-snapshot", ID: id, Group: tk.group, CephCSI: true}, p)
			}
			if _, err := tk.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: tk.secrets}); err != nil {
				t.Fatal(err)
			}
			check(t)
		})
	}
	for _, point := range []string{"cephfs.CreateVolume.shallow-reserved", "cephfs.CreateVolume.shallow-referenced"} {
		t.Run("shallow/"+point, func(t *testing.T) {
			name := "crash-sh-" + point
			runChild(t, crashOp{Kind: "create-ro", Name: name, SrcSn: snap, Group: tk.group, CephCSI: true}, point)
			v := tk.create(t, cephcsiReq(tk.env, name, rox, snapSource(snap)))
			if again := tk.create(t, cephcsiReq(tk.env, name, rox, snapSource(snap))); again.GetVolumeId() != v.GetVolumeId() {
				t.Fatalf("second retry gave %s, first %s", again.GetVolumeId(), v.GetVolumeId())
			}
			if tr, err := cephcsi.ReadTracker(ctx, tk.loc(), cephcsi.TrackerName(snap)); err != nil || len(tr.Refs) != 3 {
				t.Fatalf("tracker after a resumed shallow create: %+v, %v", tr, err)
			}
			tk.deleteVolume(t, ctx, v.GetVolumeId())
			check(t)
		})
	}
	// the last reference of a deleted snapshot, ceph-csi's own shallow volume: killed after the
	// tracker went, then after the snapshot went, before its journal entry did
	t.Run("last-reference", func(t *testing.T) {
		if _, err := tk.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap, Secrets: tk.secrets}); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"cephfs.DeleteCephCSIVolume.unreferenced", "cephfs.cephcsi-snapshot.removed"} {
			runChild(t, crashOp{Kind: "delete-volume", ID: sh, Group: tk.group, CephCSI: true}, p)
		}
		tk.deleteVolume(t, ctx, sh)
		runChild(t, crashOp{Kind: "delete-volume", ID: vol, Group: tk.group, CephCSI: true}, "cephfs.DeleteCephCSIVolume.subvolume")
		tk.deleteVolume(t, ctx, vol)
		tk.assertEmpty(t)
	})
}

func (e *env) deleteVolume(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatalf("DeleteVolume(%s): %v", id, err)
	}
}
