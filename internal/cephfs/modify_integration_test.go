package cephfs

import (
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestModifyVolumePins: a VolumeAttributesClass's pins reach the subvolume's directory (where
// every client and the MDS see them) at CreateVolume and at ControllerModifyVolume; a class
// without pins unpins; a bad class or a shallow volume changes nothing.
func TestModifyVolumePins(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	req := e.createReq("pinned", 8*mib, rwx, nil)
	req.MutableParameters = map[string]string{"pinExport": "0", "pinRandom": "0.005"}
	v := e.create(t, req)
	// read through a new mount each time: a client that has the directory cached goes on
	// answering its old ceph.dir.pin
	xattrs := func() [3]string {
		t.Helper()
		// the pins sit on /volumes/<group>/<subvolume>, the parent of the volume's root
		dir := filepath.Dir(filepath.Join(mountRoot(t), v.GetVolumeContext()["rootPath"]))
		var out [3]string
		for i, name := range []string{"ceph.dir.pin", "ceph.dir.pin.distributed", "ceph.dir.pin.random"} {
			buf := make([]byte, 64)
			n, err := unix.Getxattr(dir, name, buf)
			if err != nil {
				t.Fatalf("getxattr %s %s: %v", dir, name, err)
			}
			out[i] = string(buf[:n])
		}
		return out
	}
	modify := func(p map[string]string) error {
		_, err := e.client.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: v.GetVolumeId(), MutableParameters: p, Secrets: e.cl.Secrets()})
		return err
	}
	if got := xattrs(); got != [3]string{"0", "0", "0.005"} {
		t.Fatalf("after CreateVolume with pins: pin, distributed, random = %q", got)
	}
	if err := modify(map[string]string{"pinDistributed": "true"}); err != nil {
		t.Fatal(err)
	}
	if got := xattrs(); got != [3]string{"-1", "1", "0"} {
		t.Fatalf("after ModifyVolume to pinDistributed only: %q (the class's other pins must go back to their defaults)", got)
	}
	for _, bad := range []map[string]string{{"pinRandom": "0.5"}, {"pinExport": "-7"}, {"pinDistributed": "true", "bogus": "1"}} {
		if err := modify(bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("ModifyVolume %v: %v, want INVALID_ARGUMENT", bad, err)
		}
		if got := xattrs(); got != [3]string{"-1", "1", "0"} {
			t.Fatalf("a refused modification %v changed the pins to %q", bad, got)
		}
	}
	if err := modify(nil); err != nil {
		t.Fatal(err)
	}
	if got := xattrs(); got != [3]string{"-1", "0", "0"} {
		t.Fatalf("after ModifyVolume to a class without pins: %q", got)
	}

	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "pinned-snap", SourceVolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	shallow := e.createReq("pinned-shallow", 8*mib, rox, snapSource(snap.GetSnapshot().GetSnapshotId()))
	shallow.MutableParameters = map[string]string{"pinExport": "0"}
	if _, err := e.client.CreateVolume(ctx, shallow); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a shallow volume with pins: %v, want INVALID_ARGUMENT", err)
	}
	for _, del := range []func() error{
		func() error {
			_, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: e.cl.Secrets()})
			return err
		},
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()})
			return err
		},
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}
