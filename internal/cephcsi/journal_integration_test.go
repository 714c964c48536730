package cephcsi_test

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
)

// TestReadsWhatCephCSIWrote has ceph-csi create an RBD volume and a snapshot of it, and reads
// both back through this package: handles, directory keys, entry attributes.
func TestReadsWhatCephCSIWrote(t *testing.T) {
	cl := cephtest.Env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	conn, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	rns, _ := cephcsitest.RBDNamespace(t, cl, conn)
	ns := cephcsitest.NewNS(t, cl, `"rbd":{"radosNamespace":"`+rns+`"}`)
	d := ns.Start(t, cephcsitest.Options{Type: "rbd", Controller: true})
	secrets := cephcsitest.Secrets(cl)
	cc := csi.NewControllerClient(d.Conn)
	name := "pvc-journal-" + time.Now().Format("150405.000000")
	vol, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}},
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID, "pool": cl.RBDPool, "imageFeatures": "layering",
			"csi.storage.k8s.io/pvc/namespace": "app-ns"},
		Secrets: secrets,
	})
	if err != nil {
		t.Fatal(err)
	}
	volID := vol.GetVolume().GetVolumeId()
	h, err := volid.ParseHandle(volID)
	if err != nil {
		t.Fatalf("ceph-csi's volume ID: %v", err)
	}
	if h.ClusterID != cephcsitest.ClusterID || h.String() != volID {
		t.Fatalf("decoded %q as %+v", volID, h)
	}
	snap, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-" + name, SourceVolumeId: volID,
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID}, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	snapID := snap.GetSnapshot().GetSnapshotId()
	sh, err := volid.ParseHandle(snapID)
	if err != nil || sh.LocationID != h.LocationID {
		t.Fatalf("snapshot handle %q: %+v, %v", snapID, sh, err)
	}

	loc := radosop.Location{Conn: conn, Pool: cl.RBDPool, Namespace: rns}

	e, err := cephcsi.Read(ctx, loc, cephcsi.Volumes, h.UUID)
	if err != nil || e == nil {
		t.Fatalf("volume entry: %v, %v", e, err)
	}
	if e.Name != name || e.ImageName() != "csi-vol-"+h.UUID || e.Attrs[cephcsi.KeyOwner] != "app-ns" || e.Attrs[cephcsi.KeyImageID] == "" || e.Encrypted() {
		t.Errorf("volume entry %+v", e)
	}
	if id, err := cephcsi.Lookup(ctx, loc, cephcsi.Volumes, cephcsi.DefaultInstanceID, name); err != nil || id != h.UUID {
		t.Errorf("Lookup(%s) = %q, %v; want %s", name, id, err, h.UUID)
	}
	se, err := cephcsi.Read(ctx, loc, cephcsi.Snapshots, sh.UUID)
	if err != nil || se == nil {
		t.Fatalf("snapshot entry: %v, %v", se, err)
	}
	if se.Name != "snapshot-"+name || se.ImageName() != "csi-snap-"+sh.UUID || se.Attrs[cephcsi.KeySource] != "csi-vol-"+h.UUID {
		t.Errorf("snapshot entry %+v", se)
	}
	all, err := cephcsi.List(ctx, loc, cephcsi.Snapshots, cephcsi.DefaultInstanceID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, x := range all {
		found = found || x.UUID == sh.UUID
	}
	if !found {
		t.Errorf("List did not find snapshot %s among %d", sh.UUID, len(all))
	}
}
