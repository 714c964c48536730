package rbd

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// takeover is a test namespace with ceph-csi's RBD controller running on it (its config.json
// names the namespace for cluster "c1") and a monoceph controller whose cluster map has the
// same entry: the state right before and after the swap.
type takeover struct {
	*env
	cephcsi csi.ControllerClient
	stop    func()
	secrets map[string]string
}

func newTakeover(t *testing.T) *takeover {
	t.Helper()
	e := newEnv(t)
	extra := fmt.Sprintf(`"rbd":{"radosNamespace":%q}`, e.ns)
	ns := cephcsitest.NewNS(t, e.cl, extra)
	d := ns.Start(t, cephcsitest.Options{Type: "rbd", Controller: true})
	e.ctrl = takeoverController(t, e)
	return &takeover{env: e, cephcsi: csi.NewControllerClient(d.Conn), stop: d.Stop, secrets: cephcsitest.Secrets(e.cl)}
}

// takeoverController is a monoceph controller whose cluster map is ceph-csi's config.json of
// a takeover in e's namespace.
func takeoverController(t *testing.T, e *env) *Controller {
	_, store := cephcsitest.ClusterMap(t, e.cl, fmt.Sprintf(`"rbd":{"radosNamespace":%q}`, e.ns), "")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	return NewController(Options{Clusters: store, Pool: pool, Locks: oplock.New(), MaxCloneDepth: 8})
}

// cephcsiParams are a ceph-csi StorageClass's parameters.
func (tk *takeover) cephcsiParams(extra ...string) map[string]string {
	p := map[string]string{"clusterID": cephcsitest.ClusterID, "pool": tk.cl.RBDPool, "imageFeatures": "layering,exclusive-lock,object-map,fast-diff",
		"csi.storage.k8s.io/fstype": "ext4"}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

func (tk *takeover) req(name string, size int64, src *csi.VolumeContentSource, params map[string]string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: mountCap,
		Parameters: params, Secrets: tk.secrets, VolumeContentSource: src}
}

func volSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

// imageOf is the image a volume ID names: ceph-csi's csi-vol-<uuid>, or monoceph's.
func imageOf(t *testing.T, id string) string {
	t.Helper()
	if h, err := volid.ParseHandle(id); err == nil {
		return "csi-vol-" + h.UUID
	}
	return "csi-vol-" + mustVol(t, id).UID
}

func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i%251)
	}
	return b
}

func mustCode(t *testing.T, err error, code codes.Code, contains ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not mention %q", err, c)
		}
	}
}

// TestTakeOverCephCSIRBD has ceph-csi make volumes, snapshots, a restore and a PVC clone with
// data in them, stops it, and has monoceph do every controller operation on them; at the end
// nothing is left: no image, no trash entry, no journal object of either driver.
func TestTakeOverCephCSIRBD(t *testing.T) {
	tk := newTakeover(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const size = 32 << 20
	p1, p2 := pattern(1, 64<<10), pattern(7, 64<<10)

	// --- ceph-csi's turn
	a, err := tk.cephcsi.CreateVolume(ctx, tk.req("pvc-a", size, nil, tk.cephcsiParams()))
	if err != nil {
		t.Fatal(err)
	}
	aID := a.GetVolume().GetVolumeId()
	tk.write(t, imageOf(t, aID), 0, p1)
	s1, err := tk.cephcsi.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: aID,
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID}, Secrets: tk.secrets})
	if err != nil {
		t.Fatal(err)
	}
	s1ID := s1.GetSnapshot().GetSnapshotId()
	tk.write(t, imageOf(t, aID), 0, p2)
	s2, err := tk.cephcsi.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-2", SourceVolumeId: aID,
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID}, Secrets: tk.secrets})
	if err != nil {
		t.Fatal(err)
	}
	s2ID := s2.GetSnapshot().GetSnapshotId()
	b, err := tk.cephcsi.CreateVolume(ctx, tk.req("pvc-b", size, snapSource(s1ID), tk.cephcsiParams("imageFeatures", "layering")))
	if err != nil {
		t.Fatal(err)
	}
	bID := b.GetVolume().GetVolumeId()
	c, err := tk.cephcsi.CreateVolume(ctx, tk.req("pvc-c", size, volSource(aID), tk.cephcsiParams("imageFeatures", "layering,deep-flatten")))
	if err != nil {
		t.Fatal(err)
	}
	cID := c.GetVolume().GetVolumeId()
	enc, err := tk.cephcsi.CreateVolume(ctx, func() *csi.CreateVolumeRequest {
		r := tk.req("pvc-enc", size, nil, tk.cephcsiParams("encrypted", "true"))
		r.Secrets = map[string]string{"userID": tk.secrets["userID"], "userKey": tk.secrets["userKey"], "encryptionPassphrase": "takeover-test-passphrase"}
		return r
	}())
	if err != nil {
		t.Fatal(err)
	}
	encID := enc.GetVolume().GetVolumeId()
	tk.stop()

	// --- monoceph's turn
	mc := tk.ctrl
	if _, err := mc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: aID, VolumeCapabilities: mountCap, Secrets: tk.secrets}); err != nil {
		t.Fatalf("ValidateVolumeCapabilities of ceph-csi's volume: %v", err)
	}
	if got := tk.read(t, imageOf(t, bID), 0, len(p1)); !bytes.Equal(got, p1) {
		t.Fatal("ceph-csi's restore does not hold snapshot 1's data")
	}
	ex, err := mc.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: aID, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * size}, Secrets: tk.secrets})
	if err != nil || ex.GetCapacityBytes() != 2*size || !ex.GetNodeExpansionRequired() {
		t.Fatalf("expand: %v, %v", ex, err)
	}
	if img := tk.openImage(t, imageOf(t, aID)); img.size != 2*size {
		t.Fatalf("image size %d after expand", img.size)
	}

	// VolumeAttributesClass: ceph-csi's image takes QoS like monoceph's; its encrypted one is refused
	modify := func(id string, p map[string]string) error {
		_, err := mc.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: p, Secrets: tk.secrets})
		return err
	}
	const iopsKey = "conf_rbd_qos_write_iops_limit"
	if err := modify(aID, map[string]string{"qosWriteIopsLimit": "100"}); err != nil {
		t.Fatalf("ModifyVolume of ceph-csi's volume: %v", err)
	}
	if got := tk.openImage(t, imageOf(t, aID)).meta[iopsKey]; got != "100" {
		t.Fatalf("%s = %q after ModifyVolume to qosWriteIopsLimit 100", iopsKey, got)
	}
	if err := modify(aID, nil); err != nil {
		t.Fatalf("ModifyVolume of ceph-csi's volume to a class without limits: %v", err)
	}
	if got, ok := tk.openImage(t, imageOf(t, aID)).meta[iopsKey]; ok {
		t.Fatalf("%s = %q after ModifyVolume to a class without limits", iopsKey, got)
	}
	mustCode(t, modify(encID, map[string]string{"qosWriteIopsLimit": "100"}), codes.FailedPrecondition, "encrypt")

	// snapshots: a clusterID naming another cluster is refused, naming both; ceph-csi's
	// snapshot class keys are accepted
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-3", SourceVolumeId: aID, Secrets: tk.secrets,
		Parameters: map[string]string{"clusterID": "other-cluster"}})
	mustCode(t, err, codes.InvalidArgument, "other-cluster", cephcsitest.ClusterID)
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-3", SourceVolumeId: aID, Secrets: tk.secrets,
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID, "snapshotNamePrefix": "mysnap-"}})
	mustCode(t, err, codes.InvalidArgument, "snapshotNamePrefix")
	s3req := &csi.CreateSnapshotRequest{Name: "snap-3", SourceVolumeId: aID, Secrets: tk.secrets,
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID, "pool": tk.cl.RBDPool, "snapshotNamePrefix": "csi-snap-"}}
	s3, err := mc.CreateSnapshot(ctx, s3req)
	if err != nil {
		t.Fatal(err)
	}
	s3ID := s3.GetSnapshot().GetSnapshotId()
	if !volid.IsHandle(s3ID) || s3.GetSnapshot().GetSourceVolumeId() != aID || s3.GetSnapshot().GetSizeBytes() != 2*size {
		t.Fatalf("snapshot of a ceph-csi volume: %+v", s3.GetSnapshot())
	}
	again, err := mc.CreateSnapshot(ctx, s3req)
	if err != nil || again.GetSnapshot().GetSnapshotId() != s3ID {
		t.Fatalf("repeated CreateSnapshot: %v, %v", again, err)
	}
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-3", SourceVolumeId: bID, Secrets: tk.secrets})
	mustCode(t, err, codes.AlreadyExists)
	tk.assertCephCSISnapshotLayout(t, aID, s3ID, "snap-3")

	// ListSnapshots knows ceph-csi's and its own ceph-csi-format snapshots
	list := func(req *csi.ListSnapshotsRequest) map[string]*csi.Snapshot {
		t.Helper()
		req.Secrets = tk.secrets
		resp, err := mc.ListSnapshots(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*csi.Snapshot{}
		for _, e := range resp.GetEntries() {
			out[e.GetSnapshot().GetSnapshotId()] = e.GetSnapshot()
		}
		return out
	}
	all := list(&csi.ListSnapshotsRequest{})
	for _, id := range []string{s1ID, s2ID, s3ID} {
		s, ok := all[id]
		if !ok || s.GetSourceVolumeId() != aID || !s.GetReadyToUse() || s.GetCreationTime() == nil || s.GetSizeBytes() == 0 {
			t.Errorf("ListSnapshots: %s = %+v", id, s)
		}
	}
	if got := list(&csi.ListSnapshotsRequest{SourceVolumeId: aID}); len(got) != 3 {
		t.Errorf("ListSnapshots of %s: %d snapshots, want 3", aID, len(got))
	}
	if got := list(&csi.ListSnapshotsRequest{SnapshotId: s2ID}); len(got) != 1 || got[s2ID] == nil {
		t.Errorf("ListSnapshots of %s: %v", s2ID, got)
	}
	if s := all[s1ID]; !s.GetCreationTime().AsTime().Before(all[s2ID].GetCreationTime().AsTime()) {
		t.Errorf("snapshot 1 (%v) not older than snapshot 2 (%v)", s.GetCreationTime().AsTime(), all[s2ID].GetCreationTime().AsTime())
	}

	// new volumes in monoceph's format from ceph-csi's snapshots and volumes
	d, err := mc.CreateVolume(ctx, tk.req("pvc-d", size, snapSource(s1ID), tk.cephcsiParams()))
	if err != nil {
		t.Fatal(err)
	}
	dID := d.GetVolume().GetVolumeId()
	if volid.IsHandle(dID) {
		t.Fatalf("new volume %s is not in monoceph's format", dID)
	}
	if got := tk.read(t, imageOf(t, dID), 0, len(p1)); !bytes.Equal(got, p1) {
		t.Error("volume restored from ceph-csi's snapshot 1 does not hold its data")
	}
	e2, err := mc.CreateVolume(ctx, tk.req("pvc-e", 2*size, volSource(aID), tk.cephcsiParams()))
	if err != nil {
		t.Fatal(err)
	}
	eID := e2.GetVolume().GetVolumeId()
	if got := tk.read(t, imageOf(t, eID), 0, len(p2)); !bytes.Equal(got, p2) {
		t.Error("clone of ceph-csi's volume does not hold its data")
	}
	f, err := mc.CreateVolume(ctx, tk.req("pvc-f", 2*size, snapSource(s3ID), tk.cephcsiParams()))
	if err != nil {
		t.Fatal(err)
	}
	fID := f.GetVolume().GetVolumeId()
	if got := tk.read(t, imageOf(t, fID), 0, len(p2)); !bytes.Equal(got, p2) {
		t.Error("volume restored from monoceph's snapshot of a ceph-csi volume does not hold its data")
	}
	_, err = mc.CreateVolume(ctx, tk.req("pvc-small", size, snapSource(s3ID), tk.cephcsiParams()))
	mustCode(t, err, codes.OutOfRange)
	g, err := mc.CreateVolume(ctx, tk.req("pvc-g", size, volSource(cID), tk.cephcsiParams()))
	if err != nil {
		t.Fatal(err)
	}
	gID := g.GetVolume().GetVolumeId()

	// ControllerPublish (the attacher: ceph-csi's CSIDriver and monoceph's both require
	// attachment): ceph-csi's volume gets an attachment object of its own, keyed by its handle's
	// UUID, beside a monoceph volume's in the same pool; a second node is refused while the
	// first has it, and the holder check finds ceph-csi's image through its journal
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	publish := func(id, node string) error {
		_, err := mc.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: node, VolumeCapability: snw, Secrets: tk.secrets})
		return err
	}
	unpublish := func(id, node string) error {
		_, err := mc.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: node, Secrets: tk.secrets})
		return err
	}
	for _, id := range []string{aID, dID, aID} {
		if err := publish(id, "node-1"); err != nil {
			t.Fatalf("publish %s to node-1: %v", id, err)
		}
	}
	mustCode(t, publish(aID, "node-2"), codes.FailedPrecondition, `"node-1"`)
	loc := radosop.Location{Conn: tk.conn, Pool: tk.cl.RBDPool, Namespace: tk.ns}
	for id, key := range map[string]string{aID: cephcsi.UUIDOf(aID), dID: mustVol(t, dID).UID} {
		if st, err := attachment.Read(ctx, loc, key); err != nil || fmt.Sprint(st.Nodes()) != "[node-1]" {
			t.Fatalf("attachment object %s of %s: published to %v, %v; want node-1", attachment.ObjectName(key), id, st.Nodes(), err)
		}
	}
	release := tk.cl.HoldImage(t, "127.0.0.2", tk.cl.RBDPool, tk.ns, imageOf(t, aID), true)
	mustCode(t, unpublish(aID, "node-1"), codes.FailedPrecondition, `"node-1"`, "127.0.0.2/32")
	release()
	for _, id := range []string{aID, dID, aID} {
		if err := unpublish(id, "node-1"); err != nil {
			t.Fatalf("unpublish %s from node-1: %v", id, err)
		}
	}
	if left, err := cephtest.ObjectsWithPrefix(tk.io, "monoceph.attach."); err != nil || len(left) > 0 {
		t.Fatalf("attachment objects after every unpublish: %v, %v", left, err)
	}
	// published to node-2 now, and left so: DeleteVolume removes its attachment (assertEmpty)
	if err := publish(aID, "node-2"); err != nil {
		t.Fatalf("publish to node-2 after node-1's unpublish: %v", err)
	}
	mustCode(t, publish(encID, "node-1"), codes.FailedPrecondition, "encrypt")
	if err := unpublish(encID, "node-1"); err != nil {
		t.Fatalf("unpublish of the encrypted volume, never published: %v", err)
	}

	// encrypted volumes: refused, except their deletion
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-enc", SourceVolumeId: encID, Secrets: tk.secrets})
	mustCode(t, err, codes.FailedPrecondition, "encrypt")
	_, err = mc.CreateVolume(ctx, tk.req("pvc-from-enc", size, volSource(encID), tk.cephcsiParams()))
	mustCode(t, err, codes.FailedPrecondition, "encrypt")
	_, err = mc.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: encID, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * size}, Secrets: tk.secrets})
	mustCode(t, err, codes.FailedPrecondition, "encrypt")
	// a class asking for encryption (librbd's, see e2e/encryption) whose secret has no passphrase
	_, err = mc.CreateVolume(ctx, tk.req("pvc-enc-2", size, nil, tk.cephcsiParams("encrypted", "true")))
	mustCode(t, err, codes.InvalidArgument, "encrypted", "encryptionPassphrase")

	// delete in an order that exercises the trash: the source first, while its snapshots'
	// clone images still need its trashed snapshots, then snapshots with restored clones
	del := func(id string) {
		t.Helper()
		if _, err := mc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: tk.secrets}); err != nil {
			t.Fatalf("DeleteVolume(%s): %v", id, err)
		}
	}
	delSnap := func(id string) {
		t.Helper()
		if _, err := mc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: id, Secrets: tk.secrets}); err != nil {
			t.Fatalf("DeleteSnapshot(%s): %v", id, err)
		}
	}
	del(aID)
	if got := tk.read(t, imageOf(t, eID), 0, len(p2)); !bytes.Equal(got, p2) {
		t.Error("clone lost its data when its ceph-csi source was deleted")
	}
	delSnap(s1ID)
	delSnap(s3ID)
	if got := tk.read(t, imageOf(t, dID), 0, len(p1)); !bytes.Equal(got, p1) {
		t.Error("restored volume lost its data when its snapshot was deleted")
	}
	for _, id := range []string{dID, eID, fID, gID, cID, bID, encID} {
		del(id)
	}
	delSnap(s2ID)
	delSnap(s2ID) // deleting twice is fine
	del(aID)
	if all := list(&csi.ListSnapshotsRequest{}); len(all) != 0 {
		t.Errorf("snapshots listed after deleting them all: %v", all)
	}
	tk.assertEmpty(t)
}

type imageInfo struct {
	size int64
	meta map[string]string
}

func (tk *takeover) openImage(t *testing.T, name string) imageInfo {
	t.Helper()
	img, err := rbd.OpenImageReadOnly(tk.io, name, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	size, err := img.GetSize()
	if err != nil {
		t.Fatal(err)
	}
	meta, err := img.ListMetadata()
	if err != nil {
		t.Fatal(err)
	}
	return imageInfo{size: int64(size), meta: meta}
}

// assertCephCSISnapshotLayout checks that a snapshot monoceph made of a ceph-csi volume is laid
// out as ceph-csi's own: a clone image of the volume's trashed snapshot with one snapshot of its
// own name, and a journal entry ceph-csi can read.
func (tk *takeover) assertCephCSISnapshotLayout(t *testing.T, volID, snapID, name string) {
	t.Helper()
	h, err := volid.ParseHandle(snapID)
	if err != nil {
		t.Fatal(err)
	}
	clone := "csi-snap-" + h.UUID
	img, err := rbd.OpenImageReadOnly(tk.io, clone, rbd.NoSnapshot)
	if err != nil {
		t.Fatalf("clone image %s: %v", clone, err)
	}
	defer img.Close()
	p, err := img.GetParent()
	if err != nil || p.Image.ImageName != imageOf(t, volID) {
		t.Fatalf("parent of %s: %+v, %v", clone, p, err)
	}
	src, err := rbd.OpenImageReadOnly(tk.io, p.Image.ImageName, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if typ, err := src.GetSnapNamespaceType(p.Snap.ID); err != nil || typ != rbd.SnapNamespaceTypeTrash {
		t.Errorf("the point in time %+v is not in the source's trash namespace: %v, %v", p.Snap, typ, err)
	}
	if _, err := userSnap(img, clone); err != nil {
		t.Errorf("%s@%s: %v", clone, clone, err)
	}
	vals, err := tk.io.GetAllOmapValues("csi.snap."+h.UUID, "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if string(vals["csi.snapname"]) != name || string(vals["csi.imagename"]) != clone || string(vals["csi.source"]) != imageOf(t, volID) || len(vals["csi.imageid"]) == 0 {
		t.Errorf("journal entry of %s: %q", snapID, vals)
	}
	dir, err := tk.io.GetAllOmapValues("csi.snaps.default", "", "", 100)
	if err != nil || string(dir["csi.snap."+name]) != h.UUID {
		t.Errorf("directory entry of %s: %q, %v", name, dir, err)
	}
}
