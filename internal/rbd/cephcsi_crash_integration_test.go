package rbd

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/volid"
)

// cephcsiCrashChild is TestCrashChild for an op on ceph-csi's objects: it runs op on a
// controller serving ceph-csi's config.json and must die at its fault point.
func cephcsiCrashChild(t *testing.T, ctx context.Context, e *env, op crashOp) {
	c, secrets := takeoverController(t, e), cephcsitest.Secrets(e.cl)
	var err error
	switch op.Kind {
	case "snapshot":
		_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: op.Name, SourceVolumeId: op.SrcVol, Secrets: secrets})
	case "delete-volume":
		_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: op.ID, Secrets: secrets})
	case "delete-snapshot":
		_, err = c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: op.ID, Secrets: secrets})
	}
	t.Fatalf("child survived its fault point (err %v): the fault point is never reached", err)
}

// TestCephCSICrashSafety kills the controller after each step of a snapshot of a ceph-csi
// volume (made in ceph-csi's format) and of the deletes of ceph-csi's snapshots and volumes;
// the retry must finish the same snapshot, one ceph-csi can read and monoceph can restore,
// and the deletes must leave no image, trash entry or ceph-csi journal key.
func TestCephCSICrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	tk := newTakeover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const size = 16 << 20
	data := pattern(3, 64<<10)
	a, err := tk.cephcsi.CreateVolume(ctx, tk.req("pvc-crash", size, nil, tk.cephcsiParams()))
	if err != nil {
		t.Fatal(err)
	}
	aID := a.GetVolume().GetVolumeId()
	tk.write(t, imageOf(t, aID), 0, data)
	tk.stop()
	mc := tk.ctrl

	for _, point := range []string{"reserved", "point", "cloned", "cut"} {
		t.Run("snapshot/"+point, func(t *testing.T) {
			name := "crash-snap-" + point
			runChild(t, crashOp{Kind: "snapshot", Name: name, SrcVol: aID, NS: tk.ns, CephCSI: true}, "rbd.CreateCephCSISnapshot."+point)
			req := &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: aID, Secrets: tk.secrets}
			resp, err := mc.CreateSnapshot(ctx, req)
			if err != nil || !resp.GetSnapshot().GetReadyToUse() || resp.GetSnapshot().GetSizeBytes() != size {
				t.Fatalf("retry after kill: %+v, %v", resp, err)
			}
			id := resp.GetSnapshot().GetSnapshotId()
			if again, err := mc.CreateSnapshot(ctx, req); err != nil || again.GetSnapshot().GetSnapshotId() != id {
				t.Fatalf("second retry: %+v, %v", again, err)
			}
			tk.assertCephCSISnapshotLayout(t, aID, id, name)
			r, err := mc.CreateVolume(ctx, tk.req("restore-"+point, size, snapSource(id), tk.cephcsiParams()))
			if err != nil {
				t.Fatal(err)
			}
			if got := tk.read(t, imageOf(t, r.GetVolume().GetVolumeId()), 0, len(data)); !bytes.Equal(got, data) {
				t.Error("restore of the snapshot a retry finished lacks the data")
			}
			if _, err := mc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId(), Secrets: tk.secrets}); err != nil {
				t.Fatal(err)
			}
			runChild(t, crashOp{Kind: "delete-snapshot", ID: id, NS: tk.ns, CephCSI: true}, "rbd.DeleteCephCSISnapshot.removed")
			if _, err := mc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: tk.secrets}); err != nil {
				t.Fatal(err)
			}
			tk.assertOnlyCephCSIVolume(t, aID)
		})
	}
	runChild(t, crashOp{Kind: "delete-volume", ID: aID, NS: tk.ns, CephCSI: true}, "rbd.DeleteCephCSIVolume.image")
	if _, err := mc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: aID, Secrets: tk.secrets}); err != nil {
		t.Fatal(err)
	}
	tk.assertEmpty(t)
}

// assertOnlyCephCSIVolume checks that of everything in the namespace only ceph-csi volume id
// is left: its image without snapshots, its journal entry and directory key, no trash entry.
func (tk *takeover) assertOnlyCephCSIVolume(t *testing.T, id string) {
	t.Helper()
	img := imageOf(t, id)
	if got := tk.images(t); strings.Join(got, ",") != img {
		t.Errorf("images = %v, want only %s", got, img)
	}
	if im, err := rbd.OpenImageReadOnly(tk.io, img, rbd.NoSnapshot); err == nil {
		snaps, _ := im.GetSnapshotNames()
		im.Close()
		if len(snaps) != 0 {
			t.Errorf("snapshots left on %s: %+v", img, snaps)
		}
	}
	if tr, _ := rbd.GetTrashList(tk.io); len(tr) != 0 {
		t.Errorf("trash entries left: %+v", tr)
	}
	h, err := volid.ParseHandle(id)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{cephcsi.Volumes.Object(h.UUID): true, cephcsi.Volumes.DirObject("default"): true}
	err = tk.io.ListObjects(func(oid string) {
		if !strings.HasPrefix(oid, "csi.") || want[oid] {
			return
		}
		if oid == cephcsi.Snapshots.DirObject("default") {
			if vals, _ := tk.io.GetAllOmapValues(oid, "", "", 100); len(vals) == 0 {
				return
			}
		}
		t.Errorf("ceph-csi journal object %s left", oid)
	})
	if err != nil {
		t.Fatal(err)
	}
}
