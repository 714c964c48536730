package cephfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/volid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// takeover is a subvolume group (and journal namespace) with ceph-csi's CephFS controller
// serving it under cluster "c1", and a monoceph controller whose map has the same entry.
type takeover struct {
	*env
	cephcsi csi.ControllerClient
	stop    func()
	secrets map[string]string
}

func newTakeover(t *testing.T) *takeover {
	t.Helper()
	e := newEnv(t)
	// ceph-csi 3.12 does not create its subvolume group
	if err := e.fsa.CreateSubVolumeGroup(e.cl.FSName, e.group, nil); err != nil {
		t.Fatal(err)
	}
	ns := cephcsitest.NewNS(t, e.cl, cephcsiExtra(e.group))
	d := ns.Start(t, cephcsitest.Options{Type: "cephfs", Controller: true})
	e.serveCephCSIMap(t)
	// ceph-csi's CephFS Secrets: the admin pair (monoceph's CephFS reads it first)
	secrets := map[string]string{"adminID": e.cl.Admin.ID, "adminKey": e.cl.Admin.Key()}
	return &takeover{env: e, cephcsi: csi.NewControllerClient(d.Conn), stop: d.Stop, secrets: secrets}
}

// cephcsiExtra is the cluster entry of ceph-csi's config.json for a takeover in group (and
// journal namespace) group.
func cephcsiExtra(group string) string {
	return fmt.Sprintf(`"cephFS":{"subvolumeGroup":%q,"radosNamespace":%q}`, group, group)
}

// serveCephCSIMap replaces e's controller by one whose cluster map is ceph-csi's config.json.
func (e *env) serveCephCSIMap(t *testing.T) {
	_, store := cephcsitest.ClusterMap(t, e.cl, cephcsiExtra(e.group), "")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	e.ctrl = NewController(Options{Clusters: store, Pool: pool, Locks: oplock.New(), CloneWait: time.Minute})
	g, err := server.NewGRPC("unix://"+filepath.Join(t.TempDir(), "csi.sock"), server.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	csi.RegisterControllerServer(g.Server, e.ctrl)
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { g.Shutdown(5 * time.Second) })
	conn, err := grpc.NewClient("unix://"+g.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e.client = csi.NewControllerClient(conn)
}

func (tk *takeover) req(name string, size int64, caps []*csi.VolumeCapability, src *csi.VolumeContentSource, extra ...string) *csi.CreateVolumeRequest {
	p := map[string]string{"clusterID": cephcsitest.ClusterID, "fsName": tk.cl.FSName}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: caps,
		Parameters: p, Secrets: tk.secrets, VolumeContentSource: src}
}

func (tk *takeover) snap(t *testing.T, c csi.ControllerClient, name, src string, params map[string]string) string {
	t.Helper()
	resp, err := c.CreateSnapshot(context.Background(), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: src, Parameters: params, Secrets: tk.secrets})
	if err != nil {
		t.Fatalf("CreateSnapshot(%s): %v", name, err)
	}
	return resp.GetSnapshot().GetSnapshotId()
}

// createWith retries while a clone copies, as a CO does.
func createWith(t *testing.T, c csi.ControllerClient, req *csi.CreateVolumeRequest) *csi.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := cephcsitest.Wait(ctx, func() (*csi.CreateVolumeResponse, error) { return c.CreateVolume(ctx, req) })
	if err != nil {
		t.Fatalf("CreateVolume(%s): %v", req.GetName(), err)
	}
	return resp.GetVolume()
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

// TestTakeOverCephCSICephFS has ceph-csi make a volume with data, snapshots, a shallow volume
// and a restore, stops it, and has monoceph do every controller operation on them, shallow
// volumes of ceph-csi's snapshots included (sharing ceph-csi's reference tracker); at the end
// no subvolume, snapshot, journal object or tracker of either driver is left.
func TestTakeOverCephCSICephFS(t *testing.T) {
	tk := newTakeover(t)
	ctx := context.Background()
	root := mountRoot(t)
	cc := tk.cephcsi
	csiParams := map[string]string{"clusterID": cephcsitest.ClusterID}

	// --- ceph-csi's turn
	a := createWith(t, cc, tk.req("pvc-a", 16*mib, rwx, nil))
	aID := a.GetVolumeId()
	aPath := filepath.Join(root, a.GetVolumeContext()["subvolumePath"])
	if err := os.WriteFile(filepath.Join(aPath, "one"), []byte("first"), 0o644); err != nil {
		t.Fatal(err)
	}
	s1 := tk.snap(t, cc, "snap-1", aID, csiParams)
	if err := os.WriteFile(filepath.Join(aPath, "two"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	s2 := tk.snap(t, cc, "snap-2", aID, csiParams)
	sh1 := createWith(t, cc, tk.req("pvc-sh1", 16*mib, rox, snapSource(s1))).GetVolumeId()
	r := createWith(t, cc, tk.req("pvc-r", 16*mib, rwx, snapSource(s2))).GetVolumeId()
	enc := createWith(t, cc, tk.req("pvc-enc", 16*mib, rwx, nil)).GetVolumeId()
	tk.stop()
	// ceph-csi's CephFS encryption needs a KMS and fscrypt on the node; its controller only
	// records the KMS in the journal, which is what monoceph reads: recorded here by hand
	if err := tk.io.SetOmap("csi.volume."+cephcsi.UUIDOf(enc), map[string][]byte{cephcsi.KeyEncryptKMS: []byte("vault")}); err != nil {
		t.Fatal(err)
	}

	// --- monoceph's turn
	mc := tk.client
	for _, id := range []string{aID, sh1, r} {
		caps := rwx
		if id == sh1 {
			caps = rox
		}
		if v, err := mc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: caps, Secrets: tk.secrets}); err != nil || v.GetConfirmed() == nil {
			t.Fatalf("ValidateVolumeCapabilities(%s): %v, %v", id, v, err)
		}
	}
	if v, _ := mc.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: sh1, VolumeCapabilities: rwx, Secrets: tk.secrets}); v.GetConfirmed() != nil {
		t.Error("a ceph-csi shallow volume was confirmed for writers")
	}
	if ex, err := mc.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: aID, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib}, Secrets: tk.secrets}); err != nil || ex.GetCapacityBytes() != 32*mib {
		t.Fatalf("expand: %v, %v", ex, err)
	}
	if info, err := tk.fsa.SubVolumeInfo(tk.cl.FSName, tk.group, "csi-vol-"+cephcsi.UUIDOf(aID)); err != nil || fmt.Sprint(info.BytesQuota) != fmt.Sprint(32*mib) {
		t.Fatalf("quota after expand: %v, %v", info, err)
	}
	_, err := mc.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: sh1, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib}, Secrets: tk.secrets})
	mustCode(t, err, codes.InvalidArgument, "shallow")

	// VolumeAttributesClass: ceph-csi's subvolume takes pins like monoceph's (read through a new
	// mount each time: a client with the directory cached answers its old pin); its shallow
	// volume has no subvolume to pin, its encrypted one is refused
	pin := func() string {
		t.Helper()
		dir := filepath.Dir(filepath.Join(mountRoot(t), a.GetVolumeContext()["subvolumePath"]))
		buf := make([]byte, 64)
		n, err := unix.Getxattr(dir, "ceph.dir.pin", buf)
		if err != nil {
			t.Fatalf("getxattr %s: %v", dir, err)
		}
		return string(buf[:n])
	}
	modify := func(id string, p map[string]string) error {
		_, err := mc.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: p, Secrets: tk.secrets})
		return err
	}
	if err := modify(aID, map[string]string{"pinExport": "0"}); err != nil {
		t.Fatalf("ModifyVolume of ceph-csi's volume: %v", err)
	}
	if got := pin(); got != "0" {
		t.Fatalf("ceph.dir.pin %q after ModifyVolume to pinExport 0", got)
	}
	if err := modify(aID, nil); err != nil {
		t.Fatalf("ModifyVolume of ceph-csi's volume to a class without pins: %v", err)
	}
	if got := pin(); got != "-1" {
		t.Fatalf("ceph.dir.pin %q after ModifyVolume to a class without pins", got)
	}
	mustCode(t, modify(sh1, map[string]string{"pinExport": "0"}), codes.InvalidArgument, "shallow")
	mustCode(t, modify(enc, map[string]string{"pinExport": "0"}), codes.FailedPrecondition, "encrypt")

	// snapshots in ceph-csi's format; ceph-csi's class keys checked against the source
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-3", SourceVolumeId: aID, Secrets: tk.secrets, Parameters: map[string]string{"clusterID": "elsewhere"}})
	mustCode(t, err, codes.InvalidArgument, "elsewhere", cephcsitest.ClusterID)
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-3", SourceVolumeId: aID, Secrets: tk.secrets, Parameters: map[string]string{"fsName": "otherfs"}})
	mustCode(t, err, codes.InvalidArgument, "otherfs", tk.cl.FSName)
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-sh", SourceVolumeId: sh1, Secrets: tk.secrets})
	mustCode(t, err, codes.InvalidArgument, "shallow")
	s3 := tk.snap(t, mc, "snap-3", aID, map[string]string{"clusterID": cephcsitest.ClusterID, "fsName": tk.cl.FSName})
	if !volid.IsHandle(s3) {
		t.Fatalf("snapshot of a ceph-csi volume %q is not a ceph-csi handle", s3)
	}
	if again := tk.snap(t, mc, "snap-3", aID, nil); again != s3 {
		t.Fatalf("repeated CreateSnapshot: %s, want %s", again, s3)
	}
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
	for _, id := range []string{s1, s2, s3} {
		if s := all[id]; s == nil || s.GetSourceVolumeId() != aID || s.GetCreationTime() == nil || s.GetSizeBytes() != 32*mib {
			t.Errorf("ListSnapshots: %s = %+v", id, s)
		}
	}
	if got := list(&csi.ListSnapshotsRequest{SourceVolumeId: aID}); len(got) != 3 {
		t.Errorf("ListSnapshots of %s: %d, want 3", aID, len(got))
	}

	// monoceph volumes from ceph-csi's snapshots and volumes
	b := createWith(t, mc, tk.req("pvc-b", 32*mib, rwx, snapSource(s1)))
	c := createWith(t, mc, tk.req("pvc-c", 32*mib, rwx, volSource(aID)))
	d := createWith(t, mc, tk.req("pvc-d", 32*mib, rwx, volSource(sh1)))
	for _, v := range []*csi.Volume{b, c, d} {
		if volid.IsHandle(v.GetVolumeId()) {
			t.Fatalf("new volume %s is not in monoceph's format", v.GetVolumeId())
		}
	}
	wantFiles := func(dir string, want ...string) {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range entries {
			got = append(got, e.Name())
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s holds %v, want %v", dir, got, want)
		}
	}
	wantFiles(filepath.Join(root, b.GetVolumeContext()["rootPath"]), "one")
	wantFiles(filepath.Join(root, c.GetVolumeContext()["rootPath"]), "one", "two")
	wantFiles(filepath.Join(root, d.GetVolumeContext()["rootPath"]), "one")

	// shallow volumes of ceph-csi's snapshot, sharing ceph-csi's tracker with its own
	sh2 := createWith(t, mc, tk.req("pvc-sh2", 16*mib, rox, snapSource(s1)))
	sh3 := createWith(t, mc, tk.req("pvc-sh3", 16*mib, rox, volSource(sh1)))
	for _, v := range []*csi.Volume{sh2, sh3} {
		vc := v.GetVolumeContext()
		if vc["shallow"] != "true" || vc["snapshotName"] != "csi-snap-"+cephcsi.UUIDOf(s1) {
			t.Errorf("shallow volume context %v", vc)
		}
		wantFiles(filepath.Join(root, filepath.Dir(vc["rootPath"]), ".snap", vc["snapshotName"], filepath.Base(vc["rootPath"])), "one")
	}
	tracker, err := cephcsi.ReadTracker(ctx, tk.loc(), cephcsi.TrackerName(s1))
	if err != nil || tracker.Count != 4 {
		t.Fatalf("ceph-csi's tracker of %s: %+v, %v (want the snapshot and three shallow volumes)", s1, tracker, err)
	}

	// encrypted: refused, but deletable
	_, err = mc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-enc", SourceVolumeId: enc, Secrets: tk.secrets})
	mustCode(t, err, codes.FailedPrecondition, "encrypt")
	_, err = mc.CreateVolume(ctx, tk.req("pvc-from-enc", 16*mib, rwx, volSource(enc)))
	mustCode(t, err, codes.FailedPrecondition, "encrypt")
	_, err = mc.CreateVolume(ctx, tk.req("pvc-enc-2", 16*mib, rwx, nil, "encrypted", "true"))
	mustCode(t, err, codes.InvalidArgument, "encrypted", "encryption")

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
	// the snapshot goes for the CO but stays for its shallow volumes
	delSnap(s1)
	if _, ok := list(&csi.ListSnapshotsRequest{})[s1]; ok {
		t.Error("a deleted snapshot kept for shallow volumes is still listed")
	}
	_, err = mc.CreateVolume(ctx, tk.req("pvc-late", 16*mib, rwx, snapSource(s1)))
	mustCode(t, err, codes.NotFound)
	del(sh1)
	del(sh2.GetVolumeId())
	if snaps, _ := tk.fsa.ListSubVolumeSnapshots(tk.cl.FSName, tk.group, "csi-vol-"+cephcsi.UUIDOf(aID)); len(snaps) != 3 {
		t.Errorf("snapshots of the source while a shallow volume remains: %v", snaps)
	}
	del(sh3.GetVolumeId())
	if snaps, _ := tk.fsa.ListSubVolumeSnapshots(tk.cl.FSName, tk.group, "csi-vol-"+cephcsi.UUIDOf(aID)); len(snaps) != 2 {
		t.Errorf("snapshots of the source after its last shallow volume: %v", snaps)
	}
	// the source goes with retained snapshots, which stay usable
	del(aID)
	e := createWith(t, mc, tk.req("pvc-e", 32*mib, rwx, snapSource(s2)))
	wantFiles(filepath.Join(root, e.GetVolumeContext()["rootPath"]), "one", "two")
	sh4 := createWith(t, mc, tk.req("pvc-sh4", 16*mib, rox, snapSource(s3)))
	if rp := sh4.GetVolumeContext()["rootPath"]; strings.Count(rp, "/") != 3 {
		t.Errorf("shallow volume of a retained subvolume's snapshot: rootPath %q, want the subvolume's base directory", rp)
	}
	del(sh4.GetVolumeId())
	for _, id := range []string{s2, s3} {
		delSnap(id)
		delSnap(id)
	}
	for _, id := range []string{b.GetVolumeId(), c.GetVolumeId(), d.GetVolumeId(), e.GetVolumeId(), r, enc} {
		del(id)
		del(id)
	}
	if all := list(&csi.ListSnapshotsRequest{}); len(all) != 0 {
		t.Errorf("snapshots listed after deleting them all: %v", all)
	}
	tk.assertEmpty(t)
}
