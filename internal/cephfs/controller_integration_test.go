package cephfs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestVolumeLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	v := e.create(t, e.createReq("vol", 10*mib+1, rwx, nil))
	if v.GetCapacityBytes() != 11*mib || !strings.HasPrefix(v.GetVolumeContext()["rootPath"], "/volumes/"+e.group+"/csi-vol-") ||
		v.GetVolumeContext()["fsName"] != e.cl.FSName {
		t.Fatalf("volume = %+v", v)
	}
	info, err := e.fsa.SubVolumeInfo(e.cl.FSName, e.group, strings.Split(v.GetVolumeContext()["rootPath"], "/")[3])
	if err != nil || info.BytesQuota != admin.ByteCount(11*mib) {
		t.Fatalf("subvolume info: %+v %v", info, err)
	}
	again := e.create(t, e.createReq("vol", 11*mib, rwx, nil))
	if again.GetVolumeId() != v.GetVolumeId() {
		t.Fatalf("repeat gave %s, first %s", again.GetVolumeId(), v.GetVolumeId())
	}
	if _, err := e.client.CreateVolume(ctx, e.createReq("vol", 20*mib, rwx, nil)); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("same name other size: %v", err)
	}
	exp, err := e.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib}, Secrets: e.cl.Secrets()})
	if err != nil || exp.GetCapacityBytes() != 32*mib || exp.GetNodeExpansionRequired() {
		t.Fatalf("expand = %+v, %v", exp, err)
	}
	name := strings.Split(v.GetVolumeContext()["rootPath"], "/")[3]
	info, _ = e.fsa.SubVolumeInfo(e.cl.FSName, e.group, name)
	if info.BytesQuota != admin.ByteCount(32*mib) {
		t.Fatalf("quota after expand = %v", info.BytesQuota)
	}
	if _, err := e.client.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: v.GetVolumeId(), VolumeCapabilities: rwx, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	c, err := e.client.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: e.params()})
	if err != nil || c.GetAvailableCapacity() <= 0 {
		t.Fatalf("GetCapacity = %v, %v", c, err)
	}
	for range 2 {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: v.GetVolumeId(), VolumeCapabilities: rwx, Secrets: e.cl.Secrets()}); status.Code(err) != codes.NotFound {
		t.Fatalf("validate after delete: %v", err)
	}
	e.assertEmpty(t)
}

// TestSnapshotsAndClones writes data through a real ceph-fuse mount, snapshots, changes the
// data, and checks the clones hold exactly the snapshot's (or, for a PVC-PVC clone, the
// current) data; then deletes the source with retained snapshots and clones again.
func TestSnapshotsAndClones(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	root := mountRoot(t)
	src := e.create(t, e.createReq("src", 16*mib, rwx, nil))
	srcDir := filepath.Join(root, src.GetVolumeContext()["rootPath"])
	write := func(dir, name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(dir, name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	write(srcDir, "a.txt", "before")

	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: src.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.GetSnapshot()
	if !s.GetReadyToUse() || s.GetSizeBytes() != 16*mib || time.Since(s.GetCreationTime().AsTime()) > time.Minute || time.Since(s.GetCreationTime().AsTime()) < -time.Minute {
		t.Fatalf("snapshot = %+v (creation %v)", s, s.GetCreationTime().AsTime())
	}
	write(srcDir, "a.txt", "after")
	write(srcDir, "b.txt", "later")

	if _, err := e.client.CreateVolume(ctx, e.createReq("small", 8*mib, rwx, snapSource(s.GetSnapshotId()))); status.Code(err) != codes.OutOfRange {
		t.Fatalf("clone smaller than snapshot: %v", err)
	}
	clone := e.create(t, e.createReq("clone", 32*mib, rwx, snapSource(s.GetSnapshotId())))
	cloneDir := filepath.Join(root, clone.GetVolumeContext()["rootPath"])
	if got := read(cloneDir, "a.txt"); got != "before" {
		t.Fatalf("clone a.txt = %q, want the snapshot's", got)
	}
	if got := read(cloneDir, "b.txt"); !strings.Contains(got, "no such file") {
		t.Fatalf("clone has b.txt written after the snapshot: %q", got)
	}
	pvc := e.create(t, e.createReq("pvc-clone", 16*mib, rwx, volSource(src.GetVolumeId())))
	if got := read(filepath.Join(root, pvc.GetVolumeContext()["rootPath"]), "b.txt"); got != "later" {
		t.Fatalf("PVC-PVC clone b.txt = %q", got)
	}
	snaps, _ := e.fsa.ListSubVolumeSnapshots(e.cl.FSName, e.group, strings.Split(src.GetVolumeContext()["rootPath"], "/")[3])
	for _, sn := range snaps {
		if strings.HasPrefix(sn, clonePrefix) {
			t.Fatalf("transient snapshot left on the source: %v", snaps)
		}
	}
	list, err := e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: src.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Fatalf("ListSnapshots = %v, %v", list, err)
	}

	// the source goes, its snapshot stays usable (retained snapshots)
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: src.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	late := e.create(t, e.createReq("late", 16*mib, rwx, snapSource(s.GetSnapshotId())))
	if got := read(filepath.Join(root, late.GetVolumeContext()["rootPath"]), "a.txt"); got != "before" {
		t.Fatalf("clone from a retained snapshot: a.txt = %q", got)
	}
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.GetSnapshotId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []*csi.Volume{clone, pvc, late} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

func TestControllerErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	v := e.create(t, e.createReq("exists", 8*mib, rwx, nil))
	defer e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()})
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		code codes.Code
		msg  string
	}{
		{"unknown parameter", e.createReq("x", mib, rwx, nil, "fsname", "x"), codes.InvalidArgument, `unknown key "fsname"`},
		{"missing filesystem", e.createReq("x", mib, rwx, nil, "fsName", "nope"), codes.InvalidArgument, `filesystem "nope" does not exist`},
		{"bad group", e.createReq("x", mib, rwx, nil, "subvolumeGroup", "a/b"), codes.InvalidArgument, `parameters["subvolumeGroup"]`},
		{"bad mounter", e.createReq("x", mib, rwx, nil, "mounter", "nfs"), codes.InvalidArgument, `parameters["mounter"]`},
		{"bad backingSnapshot", e.createReq("x", mib, rwx, nil, "backingSnapshot", "maybe"), codes.InvalidArgument, `parameters["backingSnapshot"]`},
		{"block", &csi.CreateVolumeRequest{Name: "x", Parameters: e.params(), Secrets: e.cl.Secrets(), VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}}, codes.InvalidArgument, "block access is not supported"},
		{"missing snapshot", e.createReq("x", mib, rwx, snapSource("fs1:local:1:aaaaaaaaaaaaaaaa:bbbbbbbbbbbbbbbb")), codes.NotFound, "does not exist"},
		{"malformed snapshot", e.createReq("x", mib, rwx, snapSource("nonsense")), codes.NotFound, "does not exist"},
		{"shallow from regular volume", e.createReq("x", mib, rox, volSource(v.GetVolumeId())), codes.InvalidArgument, "shallow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.client.CreateVolume(ctx, tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tt.code, tt.msg)
			}
		})
	}
	if subs := e.subvolumes(t); len(subs) != 1 {
		t.Fatalf("bad requests changed state: %v", subs)
	}
	if objs := e.objects(t); len(objs) != 1 {
		t.Fatalf("bad requests left journal state: %v", objs)
	}
}
