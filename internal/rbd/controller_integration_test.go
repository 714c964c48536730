package rbd

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const mib = 1 << 20

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestConcurrentCreateSameNameMakesOneImage(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const n = 32
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for { // ABORTED means "in progress, retry", exactly what a CO does
				resp, err := e.client.CreateVolume(ctx, e.createReq("pvc-same", 8*mib, nil))
				if status.Code(err) == codes.Aborted {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				ids[i] = resp.GetVolume().GetVolumeId()
				return
			}
		}()
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("caller %d got %s, caller 0 %s", i, ids[i], ids[0])
		}
	}
	if imgs := e.images(t); len(imgs) != 1 {
		t.Fatalf("images = %v, want exactly one", imgs)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ids[0], Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

func TestSnapshotCloneRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("src", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	v := vol.GetVolume()
	if v.GetCapacityBytes() != 8*mib || v.GetVolumeContext()["imageName"] == "" {
		t.Fatalf("volume = %+v", v)
	}
	image := v.GetVolumeContext()["imageName"]
	before, after := bytes.Repeat([]byte("A"), 64<<10), bytes.Repeat([]byte("B"), 64<<10)
	e.write(t, image, 1*mib, before)

	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.GetSnapshot()
	if !s.GetReadyToUse() || s.GetSizeBytes() != 8*mib || s.GetCreationTime().AsTime().Before(time.Now().Add(-time.Minute)) || s.GetSourceVolumeId() != v.GetVolumeId() {
		t.Fatalf("snapshot = %+v", s)
	}
	again, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil || again.GetSnapshot().GetSnapshotId() != s.GetSnapshotId() || !again.GetSnapshot().GetCreationTime().AsTime().Equal(s.GetCreationTime().AsTime()) {
		t.Fatalf("repeat CreateSnapshot = %+v, %v", again, err)
	}
	e.write(t, image, 1*mib, after) // after the snapshot: must not reach the clone

	// smaller than the snapshot: OUT_OF_RANGE; larger: clone then grow
	src := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: s.GetSnapshotId()}}}
	if _, err := e.client.CreateVolume(ctx, e.createReq("too-small", 4*mib, src)); status.Code(err) != codes.OutOfRange {
		t.Fatalf("clone smaller than snapshot: %v, want OutOfRange", err)
	}
	clone, err := e.client.CreateVolume(ctx, e.createReq("clone", 16*mib, src))
	if err != nil {
		t.Fatal(err)
	}
	cimg := clone.GetVolume().GetVolumeContext()["imageName"]
	if got := e.read(t, cimg, 1*mib, len(before)); !bytes.Equal(got, before) {
		t.Fatalf("clone has %q..., want the snapshot's data", got[:8])
	}
	if clone.GetVolume().GetCapacityBytes() != 16*mib || clone.GetVolume().GetContentSource().GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Fatalf("clone = %+v", clone.GetVolume())
	}
	e.write(t, cimg, 0, []byte("clone-only")) // writes to the clone do not reach the source
	if got := e.read(t, image, 0, 10); bytes.Equal(got, []byte("clone-only")) {
		t.Fatal("clone write reached the source")
	}

	// PVC-PVC clone: the current data of the source, no snapshot left behind
	vsrc := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.GetVolumeId()}}}
	pvclone, err := e.client.CreateVolume(ctx, e.createReq("pvc-clone", 8*mib, vsrc))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.read(t, pvclone.GetVolume().GetVolumeContext()["imageName"], 1*mib, len(after)); !bytes.Equal(got, after) {
		t.Fatal("PVC-PVC clone lacks the source's current data")
	}
	img, _ := rbd.OpenImageReadOnly(e.io, image, rbd.NoSnapshot)
	snaps, _ := img.GetSnapshotNames()
	img.Close()
	for _, sn := range snaps {
		if sn.Name != rbdname.Snapshot(mustSnap(t, s.GetSnapshotId()).SnapUID) && len(sn.Name) > 9 && sn.Name[:9] == "csi-clone" {
			t.Fatalf("transient clone snapshot left: %v", snaps)
		}
	}

	// ListSnapshots by source volume, by ID, and unfiltered with paging
	list, err := e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetSnapshotId() != s.GetSnapshotId() {
		t.Fatalf("ListSnapshots(source) = %v, %v", list, err)
	}
	if _, err := e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: "garbage", Secrets: e.cl.Secrets()}); status.Code(err) != codes.Aborted {
		t.Fatalf("bad token: %v, want Aborted", err)
	}

	// delete the source while the snapshot and clones exist: the snapshot stays usable
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: v.GetVolumeId(), VolumeCapabilities: mountCap, Secrets: e.cl.Secrets()}); status.Code(err) != codes.NotFound {
		t.Fatalf("deleted volume still validates: %v", err)
	}
	late, err := e.client.CreateVolume(ctx, e.createReq("late-clone", 8*mib, src))
	if err != nil {
		t.Fatalf("clone from a snapshot of a deleted volume: %v", err)
	}
	if got := e.read(t, late.GetVolume().GetVolumeContext()["imageName"], 1*mib, len(before)); !bytes.Equal(got, before) {
		t.Fatal("late clone lacks the snapshot's data")
	}
	// the clone is a live volume of its own, not hidden like its deleted source (librbd copies
	// a parent's image metadata into its clones)
	if _, err := e.client.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: late.GetVolume().GetVolumeId(), VolumeCapabilities: mountCap, Secrets: e.cl.Secrets()}); err != nil {
		t.Errorf("ValidateVolumeCapabilities of the late clone: %v", err)
	}
	if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(late.GetVolume().GetVolumeId(), "node-a", mountCap[0], false)); err != nil {
		t.Errorf("publish of the late clone: %v", err)
	} else if err := e.unpublish(t, late.GetVolume().GetVolumeId(), "node-a"); err != nil {
		t.Errorf("unpublish of the late clone: %v", err)
	}
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.GetSnapshotId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	// the clones still read their data after the snapshot and its volume are gone
	if got := e.read(t, late.GetVolume().GetVolumeContext()["imageName"], 1*mib, len(before)); !bytes.Equal(got, before) {
		t.Fatal("clone lost its data when the snapshot was deleted")
	}
	for _, id := range []string{clone.GetVolume().GetVolumeId(), pvclone.GetVolume().GetVolumeId(), late.GetVolume().GetVolumeId()} {
		for range 2 { // idempotent
			if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.assertEmpty(t)
}

func mustSnap(t *testing.T, id string) volid.RBDSnapshot {
	s, err := volid.ParseRBDSnapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFlattenPastCloneDepth(t *testing.T) {
	e := newEnv(t) // MaxCloneDepth 2
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("gen-0", 4*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	var created []string
	for gen := 1; gen <= 3; gen++ {
		src := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
		v, err := e.client.CreateVolume(ctx, e.createReq("gen-"+string(rune('0'+gen)), 4*mib, src))
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, v.GetVolume().GetVolumeId())
		img, _ := rbd.OpenImageReadOnly(e.io, v.GetVolume().GetVolumeContext()["imageName"], rbd.NoSnapshot)
		_, perr := img.GetParent()
		img.Close()
		if hasParent := perr == nil; hasParent != (gen <= 2) {
			t.Fatalf("generation %d has parent = %v; want a parent up to depth 2, flattened after", gen, hasParent)
		}
		id = v.GetVolume().GetVolumeId()
	}
	for i := len(created) - 1; i >= 0; i-- {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: created[i], Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

func TestControllerErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("exists", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolume().GetVolumeId(), Secrets: e.cl.Secrets()})
	}()
	badParams := func(k, v string) *csi.CreateVolumeRequest {
		r := e.createReq("bad", 8*mib, nil)
		r.Parameters[k] = v
		return r
	}
	noParam := func(k string) *csi.CreateVolumeRequest {
		r := e.createReq("bad", 8*mib, nil)
		delete(r.Parameters, k)
		return r
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"same name other size", func() error { _, err := e.client.CreateVolume(ctx, e.createReq("exists", 16*mib, nil)); return err }, codes.AlreadyExists, "outside capacity_range"},
		{"unknown parameter", func() error { _, err := e.client.CreateVolume(ctx, badParams("imagefeatures", "x")); return err }, codes.InvalidArgument, `unknown key "imagefeatures"`},
		{"bad feature", func() error {
			_, err := e.client.CreateVolume(ctx, badParams("imageFeatures", "layering,fast-diff"))
			return err
		}, codes.InvalidArgument, `"fast-diff" needs "object-map"`},
		{"bad mounter", func() error { _, err := e.client.CreateVolume(ctx, badParams("mounter", "nfs")); return err }, codes.InvalidArgument, `parameters["mounter"]`},
		{"no pool", func() error { _, err := e.client.CreateVolume(ctx, noParam("pool")); return err }, codes.InvalidArgument, `parameters["pool"]: is missing`},
		{"missing pool", func() error { _, err := e.client.CreateVolume(ctx, badParams("pool", "nope")); return err }, codes.InvalidArgument, `pool "nope" does not exist`},
		{"unknown cluster", func() error { _, err := e.client.CreateVolume(ctx, badParams("clusterID", "elsewhere")); return err }, codes.InvalidArgument, `clusterID "elsewhere"`},
		{"no secrets", func() error {
			r := e.createReq("x", mib, nil)
			r.Secrets = nil
			_, err := e.client.CreateVolume(ctx, r)
			return err
		}, codes.InvalidArgument, "secrets"},
		{"wrong key", func() error {
			r := e.createReq("x", mib, nil)
			r.Secrets = map[string]string{"userID": "admin", "userKey": "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="}
			_, err := e.client.CreateVolume(ctx, r)
			return err
		}, codes.Unauthenticated, "authentication"},
		{"block fs type", func() error {
			r := e.createReq("x", mib, nil)
			r.VolumeCapabilities = []*csi.VolumeCapability{{AccessMode: mountCap[0].AccessMode,
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "btrfs"}}}}
			_, err := e.client.CreateVolume(ctx, r)
			return err
		}, codes.InvalidArgument, `fs_type "btrfs"`},
		{"rwx filesystem", func() error {
			r := e.createReq("x", mib, nil)
			r.VolumeCapabilities = []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}
			_, err := e.client.CreateVolume(ctx, r)
			return err
		}, codes.InvalidArgument, "MULTI_NODE_MULTI_WRITER"},
		{"expand missing volume", func() error {
			_, err := e.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: "rv1:local:2::aaaaaaaaaaaaaaaa",
				CapacityRange: &csi.CapacityRange{RequiredBytes: mib}, Secrets: e.cl.Secrets()})
			return err
		}, codes.NotFound, "does not exist"},
		{"snapshot of malformed volume", func() error {
			_, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "garbage", Secrets: e.cl.Secrets()})
			return err
		}, codes.NotFound, "does not exist"},
		{"snapshot name on other volume", func() error {
			other, err := e.client.CreateVolume(ctx, e.createReq("other", mib, nil))
			if err != nil {
				return err
			}
			defer e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: other.GetVolume().GetVolumeId(), Secrets: e.cl.Secrets()})
			s, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "dup", SourceVolumeId: vol.GetVolume().GetVolumeId(), Secrets: e.cl.Secrets()})
			if err != nil {
				return err
			}
			defer e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.GetSnapshot().GetSnapshotId(), Secrets: e.cl.Secrets()})
			_, err = e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "dup", SourceVolumeId: other.GetVolume().GetVolumeId(), Secrets: e.cl.Secrets()})
			return err
		}, codes.AlreadyExists, "exists for source volume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if s, _ := status.FromError(err); !bytes.Contains([]byte(s.Message()), []byte(tt.msg)) {
				t.Fatalf("message %q lacks %q", s.Message(), tt.msg)
			}
		})
	}
	if imgs := e.images(t); len(imgs) != 1 {
		t.Fatalf("bad requests changed state: images %v", imgs)
	}
}

func TestExpandAndCapacity(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("grow", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	resp, err := e.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 20*mib + 1}, Secrets: e.cl.Secrets(), VolumeCapability: mountCap[0]})
	if err != nil || resp.GetCapacityBytes() != 21*mib || !resp.GetNodeExpansionRequired() {
		t.Fatalf("expand = %+v, %v", resp, err)
	}
	// never shrinks
	resp, err = e.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 4 * mib}, Secrets: e.cl.Secrets()})
	if err != nil || resp.GetCapacityBytes() != 21*mib {
		t.Fatalf("shrink request = %+v, %v", resp, err)
	}
	img, _ := rbd.OpenImageReadOnly(e.io, vol.GetVolume().GetVolumeContext()["imageName"], rbd.NoSnapshot)
	size, _ := img.GetSize()
	img.Close()
	if size != 21*mib {
		t.Fatalf("image size %d", size)
	}
	c, err := e.client.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: e.params()})
	if err != nil || c.GetAvailableCapacity() <= 0 {
		t.Fatalf("GetCapacity = %+v, %v", c, err)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
