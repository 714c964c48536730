package rbd

import (
	"maps"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
)

// TestOwnershipKeys: the names the sidecars pass with --extra-create-metadata, and the cluster
// name, land on the image in ceph-csi's keys (read back through librbd), on a retry too; a clone
// does not inherit its source's names; a snapshot's names are kept in its reservation.
func TestOwnershipKeys(t *testing.T) {
	e := newEnv(t)
	e.ctrl.opts.ClusterName = "kube-a"
	ctx := ctxT(t)
	req := e.createReq("owned", 8<<20, nil)
	maps.Copy(req.Parameters, map[string]string{owner.PVName: "pvc-0001", owner.PVCName: "data", owner.PVCNamespace: "apps"})
	var vol *csi.CreateVolumeResponse
	for range 2 { // the second call is a retry: same answer, same keys
		var err error
		if vol, err = e.client.CreateVolume(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	uid := mustVol(t, vol.GetVolume().GetVolumeId()).UID
	want := owner.Keys{owner.PVName: "pvc-0001", owner.PVCName: "data", owner.PVCNamespace: "apps", owner.ClusterName: "kube-a"}
	if got := e.imageMeta(t, rbdname.Image(uid)); !maps.Equal(got, want) {
		t.Fatalf("image metadata %v, want %v", got, want)
	}

	snapReq := &csi.CreateSnapshotRequest{Name: "owned-snap", SourceVolumeId: vol.GetVolume().GetVolumeId(), Secrets: e.cl.Secrets(),
		Parameters: map[string]string{owner.SnapshotName: "snap-1", owner.SnapshotNamespace: "apps", owner.SnapshotContentName: "snapcontent-1"}}
	snap, err := e.client.CreateSnapshot(ctx, snapReq)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := journal.Lookup(ctx, radosop.Location{Conn: e.conn, Pool: e.cl.RBDPool, Namespace: e.ns}, journal.Snapshot, "owned-snap")
	if err != nil || rec == nil {
		t.Fatalf("snapshot reservation: %v %v", rec, err)
	}
	for k, v := range map[string]string{owner.SnapshotName: "snap-1", owner.SnapshotNamespace: "apps", owner.SnapshotContentName: "snapcontent-1", owner.ClusterName: "kube-a"} {
		if rec.Attrs[k] != v {
			t.Errorf("snapshot reservation %s = %q, want %q", k, rec.Attrs[k], v)
		}
	}

	// a restore whose request carries no names must not read as the source's PV
	clone, err := e.client.CreateVolume(ctx, e.createReq("restored", 8<<20, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
		Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}))
	if err != nil {
		t.Fatal(err)
	}
	cuid := mustVol(t, clone.GetVolume().GetVolumeId()).UID
	if got := e.imageMeta(t, rbdname.Image(cuid)); !maps.Equal(got, owner.Keys{owner.ClusterName: "kube-a"}) {
		t.Fatalf("clone metadata %v, want only the cluster name", got)
	}
}

// imageMeta reads the ownership keys of an image through librbd.
func (e *env) imageMeta(t *testing.T, name string) owner.Keys {
	t.Helper()
	img, err := rbd.OpenImageReadOnly(e.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	got, err := imageOwner(img)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
