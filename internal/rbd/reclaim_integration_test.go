package rbd

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	rspb "github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// du is the image's used bytes as `rbd du` reports them: the oracle of what the pool holds.
func (e *env) du(t *testing.T, image string) int64 {
	t.Helper()
	out, err := exec.Command("rbd", "du", "--format", "json", "--pool", e.cl.RBDPool, "--namespace", e.ns, image).Output()
	if err != nil {
		t.Fatalf("rbd du %s: %v", image, err)
	}
	var du struct {
		Images []struct {
			Used int64 `json:"used_size"`
		} `json:"images"`
	}
	if err := json.Unmarshal(out, &du); err != nil {
		t.Fatalf("rbd du %s: %v: %s", image, err, out)
	}
	if len(du.Images) != 1 {
		t.Fatalf("rbd du names %d images: %s", len(du.Images), out)
	}
	return du.Images[0].Used
}

// TestControllerReclaimSpace: an image nobody has open is sparsified (its objects that hold
// only zeros are removed) and the answer reports the usage `rbd du` shows before and after; an
// image in use is left alone and the call still succeeds (its node trims it).
func TestControllerReclaimSpace(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("reclaim", 64*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id, image := vol.GetVolume().GetVolumeId(), vol.GetVolume().GetVolumeContext()["imageName"]
	img, err := rbd.OpenImage(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	// 32 MiB of data, the first 16 MiB of it then overwritten with zeros: still allocated
	data := make([]byte, 32*mib)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if _, err := img.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := img.WriteAt(make([]byte, 16*mib), 0); err != nil {
		t.Fatal(err)
	}
	written := e.du(t, image)
	req := &rspb.ControllerReclaimSpaceRequest{VolumeId: id, Secrets: e.cl.Secrets()}
	r := e.ctrl.ReclaimSpace()

	// in use (this test's handle has a watch on it): nothing done, successfully
	resp, err := r.ControllerReclaimSpace(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetPreUsage() != nil || e.du(t, image) != written {
		t.Fatalf("an image in use was sparsified: %v, rbd du %d → %d", resp, written, e.du(t, image))
	}
	if err := img.Close(); err != nil {
		t.Fatal(err)
	}

	resp, err = r.ControllerReclaimSpace(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	after := e.du(t, image)
	t.Logf("rbd du used bytes: %d MiB written (16 MiB of it zeros), %d MiB after ControllerReclaimSpace; answered pre %d MiB, post %d MiB",
		written/mib, after/mib, resp.GetPreUsage().GetUsageBytes()/mib, resp.GetPostUsage().GetUsageBytes()/mib)
	if written != 32*mib || after != 16*mib {
		t.Errorf("rbd du: %d bytes before, %d after; want 32 MiB, then 16 MiB", written, after)
	}
	if resp.GetPreUsage().GetUsageBytes() != written || resp.GetPostUsage().GetUsageBytes() != after {
		t.Errorf("answered usage %v, rbd du says %d before and %d after", resp, written, after)
	}
	// the data that was not zeros is intact
	img, err = rbd.OpenImageReadOnly(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 32*mib)
	if _, err := img.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[16*mib:], data[16*mib:]) || !bytes.Equal(got[:16*mib], make([]byte, 16*mib)) {
		t.Error("the image's content changed")
	}
	img.Close()

	// a deleted volume is NOT_FOUND
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ControllerReclaimSpace(ctx, req); status.Code(err) != codes.NotFound {
		t.Errorf("ControllerReclaimSpace of a deleted volume: %v, want NOT_FOUND", err)
	}
}
