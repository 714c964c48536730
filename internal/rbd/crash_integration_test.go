package rbd

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/childtest"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
)

// crashOp is one RPC a child process runs until it dies at a fault point.
type crashOp struct {
	Kind   string // create, snapshot, delete-volume, delete-snapshot, group-snapshot, delete-group-snapshot, publish, unpublish
	Name   string
	IDs    []string // source volumes, for group-snapshot
	SrcSn  string   // source snapshot ID, for create
	SrcVol string   // source volume ID, for create and snapshot
	ID     string   // volume or snapshot ID, for deletes, publish and unpublish
	Node   string   // for publish and unpublish
	NS     string
	// CephCSI runs the op on a controller with ceph-csi's config.json as its map (the IDs are
	// ceph-csi handles)
	CephCSI bool
}

const crashEnv = "MONOCEPH_RBD_CRASH_OP"

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
	e := newEnvIn(t, op.NS)
	ctx := ctxT(t)
	if op.CephCSI {
		cephcsiCrashChild(t, ctx, e, op)
	}
	var err error
	switch op.Kind {
	case "create":
		_, err = e.client.CreateVolume(ctx, e.createReq(op.Name, 8*mib, op.source()))
	case "snapshot":
		_, err = e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: op.Name, SourceVolumeId: op.SrcVol, Secrets: e.cl.Secrets()})
	case "delete-volume":
		_, err = e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: op.ID, Secrets: e.cl.Secrets()})
	case "delete-snapshot":
		_, err = e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: op.ID, Secrets: e.cl.Secrets()})
	case "group-snapshot":
		_, err = e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq(op.Name, op.IDs...))
	case "delete-group-snapshot":
		_, err = e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: op.ID, Secrets: e.cl.Secrets()})
	case "publish":
		_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(op.ID, op.Node, capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false), false))
	case "unpublish":
		err = e.unpublish(t, op.ID, op.Node)
	}
	t.Fatalf("child survived its fault point (err %v): the fault point is never reached", err)
}

func (op crashOp) source() *csi.VolumeContentSource {
	switch {
	case op.SrcSn != "":
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: op.SrcSn}}}
	case op.SrcVol != "":
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: op.SrcVol}}}
	}
	return nil
}

// runChild runs op in a child process armed with point and checks it was SIGKILLed.
func runChild(t *testing.T, op crashOp, point string) {
	t.Helper()
	b, _ := json.Marshal(op)
	childtest.RunToFaultPoint(t, "TestCrashChild", point, crashEnv+"="+string(b))
}

// TestCrashSafety kills the controller after each journal and Ceph step of every mutating RPC
// in turn; a retry of the same request must then succeed with one usable volume or snapshot,
// and deleting it must leave no image, snapshot, trash entry or journal key.
func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()

	// a source volume with data and a snapshot of it, for the clone scenarios
	base, err := e.client.CreateVolume(ctx, e.createReq("base", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	baseID := base.GetVolume().GetVolumeId()
	data := bytes.Repeat([]byte("crash-safe"), 100)
	e.write(t, base.GetVolume().GetVolumeContext()["imageName"], 0, data)
	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "base-snap", SourceVolumeId: baseID, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	baseline := e.journalKeys(t)

	creates := []struct {
		name   string
		op     crashOp
		points []string
	}{
		{"blank", crashOp{Kind: "create"}, []string{"rbd.CreateVolume.reserved", "rbd.CreateVolume.image"}},
		{"from-snapshot", crashOp{Kind: "create", SrcSn: snapID}, []string{"rbd.CreateVolume.reserved", "rbd.CreateVolume.image"}},
		{"from-volume", crashOp{Kind: "create", SrcVol: baseID},
			[]string{"rbd.CreateVolume.reserved", "rbd.CreateVolume.clone-snapshot", "rbd.CreateVolume.cloned", "rbd.CreateVolume.image"}},
	}
	for _, c := range creates {
		for _, point := range c.points {
			t.Run(c.name+"/"+point, func(t *testing.T) {
				op := c.op
				op.Name, op.NS = "crash-"+c.name+"-"+point, e.ns
				runChild(t, op, point)
				resp, err := e.client.CreateVolume(ctx, e.createReq(op.Name, 8*mib, op.source()))
				if err != nil {
					t.Fatalf("retry after kill: %v", err)
				}
				img := resp.GetVolume().GetVolumeContext()["imageName"]
				if op.source() != nil {
					if got := e.read(t, img, 0, len(data)); !bytes.Equal(got, data) {
						t.Fatal("clone completed by the retry lacks the source data")
					}
				} else {
					e.write(t, img, 0, []byte("usable"))
				}
				again, err := e.client.CreateVolume(ctx, e.createReq(op.Name, 8*mib, op.source()))
				if err != nil || again.GetVolume().GetVolumeId() != resp.GetVolume().GetVolumeId() {
					t.Fatalf("second retry = %v, %v", again, err)
				}
				// a crash in DeleteVolume too, then the retry
				runChild(t, crashOp{Kind: "delete-volume", ID: resp.GetVolume().GetVolumeId(), NS: e.ns}, "rbd.DeleteVolume.image")
				if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId(), Secrets: secrets}); err != nil {
					t.Fatal(err)
				}
				e.assertOnly(t, []string{rbdname.Image(mustVol(t, baseID).UID)}, baseline)
			})
		}
	}
	for _, point := range []string{"rbd.CreateSnapshot.reserved", "rbd.CreateSnapshot.cut"} {
		t.Run("snapshot/"+point, func(t *testing.T) {
			name := "crash-snap-" + point
			runChild(t, crashOp{Kind: "snapshot", Name: name, SrcVol: baseID, NS: e.ns}, point)
			resp, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: baseID, Secrets: secrets})
			if err != nil || !resp.GetSnapshot().GetReadyToUse() || resp.GetSnapshot().GetSizeBytes() != 8*mib {
				t.Fatalf("retry after kill: %+v, %v", resp, err)
			}
			runChild(t, crashOp{Kind: "delete-snapshot", ID: resp.GetSnapshot().GetSnapshotId(), NS: e.ns}, "rbd.DeleteSnapshot.removed")
			if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: resp.GetSnapshot().GetSnapshotId(), Secrets: secrets}); err != nil {
				t.Fatal(err)
			}
			e.assertOnly(t, []string{rbdname.Image(mustVol(t, baseID).UID)}, baseline)
		})
	}
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapID, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: baseID, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
