package rbd

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (e *env) groupReq(name string, ids ...string) *csi.CreateVolumeGroupSnapshotRequest {
	return &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: ids, Secrets: e.cl.Secrets()}
}

// volume creates a volume holding data at offset 0 and returns its ID and image.
func (e *env) volume(t *testing.T, name string, size int64, data []byte) (string, string) {
	t.Helper()
	resp, err := e.client.CreateVolume(ctxT(t), e.createReq(name, size, nil))
	if err != nil {
		t.Fatal(err)
	}
	img := resp.GetVolume().GetVolumeContext()["imageName"]
	if data != nil {
		e.write(t, img, 0, data)
	}
	return resp.GetVolume().GetVolumeId(), img
}

// groups lists the test namespace's RBD groups with their group snapshots.
func (e *env) groups(t *testing.T) map[string][]string {
	t.Helper()
	names, err := rbd.GroupList(e.io)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, g := range names {
		snaps, err := rbd.GroupSnapList(e.io, g)
		if err != nil {
			t.Fatal(err)
		}
		out[g] = nil
		for _, s := range snaps {
			out[g] = append(out[g], fmt.Sprintf("%s(state %d)", s.Name, s.State))
		}
	}
	return out
}

// memberOf is the group an image is a member of ("" for none).
func (e *env) memberOf(t *testing.T, image string) string {
	t.Helper()
	img, err := rbd.OpenImageReadOnly(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	g, err := img.GetGroup()
	if err != nil {
		t.Fatal(err)
	}
	return g.Name
}

func ids(snaps []*csi.Snapshot) []string {
	out := memberIDs(snaps)
	slices.Sort(out)
	return out
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msgHas ...string) bool {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
		return false
	}
	for _, m := range msgHas {
		if !strings.Contains(status.Convert(err).Message(), m) {
			t.Errorf("%s: %q does not name %q", what, status.Convert(err).Message(), m)
			return false
		}
	}
	return true
}

// TestGroupSnapshotLifecycle drives a group snapshot of two volumes through everything the CSI
// spec and Kubernetes do with it, and checks Ceph after each step.
func TestGroupSnapshotLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	a, imgA := e.volume(t, "a", 8*mib, []byte("a-before"))
	b, imgB := e.volume(t, "b", 16*mib, []byte("b-before"))

	resp, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", b, a))
	if err != nil {
		t.Fatal(err)
	}
	gs := resp.GetGroupSnapshot()
	gid, err := volid.ParseRBDGroupSnapshot(gs.GetGroupSnapshotId())
	if err != nil || !gs.GetReadyToUse() || len(gs.GetSnapshots()) != 2 || gs.GetCreationTime() == nil {
		t.Fatalf("group snapshot %+v (%v)", gs, err)
	}
	members := map[string]*csi.Snapshot{}
	for _, s := range gs.GetSnapshots() {
		members[s.GetSourceVolumeId()] = s
		m, err := volid.ParseRBDSnapshot(s.GetSnapshotId())
		if err != nil || !m.Member || m.SnapUID != gid.UID || s.GetGroupSnapshotId() != gs.GetGroupSnapshotId() || !s.GetReadyToUse() {
			t.Errorf("member %+v (%v)", s, err)
		}
	}
	if members[a].GetSizeBytes() != 8*mib || members[b].GetSizeBytes() != 16*mib {
		t.Errorf("member sizes %d, %d; want the volumes' 8 and 16 MiB", members[a].GetSizeBytes(), members[b].GetSizeBytes())
	}
	// Ceph: one group holding one complete group snapshot; the images left it again
	want := map[string][]string{rbdname.Group(gid.UID): {rbdname.GroupSnapshot(gid.UID) + "(state 1)"}}
	if got := e.groups(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("groups %v, want %v", got, want)
	}
	for _, img := range []string{imgA, imgB} {
		if g := e.memberOf(t, img); g != "" {
			t.Errorf("image %s is still a member of %s", img, g)
		}
	}
	e.write(t, imgA, 0, []byte("a-after!"))
	e.write(t, imgB, 0, []byte("b-after!"))

	// idempotent by name over the set of volumes; another set under the name is refused
	again, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", a, b))
	if err != nil || again.GetGroupSnapshot().GetGroupSnapshotId() != gs.GetGroupSnapshotId() ||
		!slices.Equal(ids(again.GetGroupSnapshot().GetSnapshots()), ids(gs.GetSnapshots())) {
		t.Errorf("repeated create = %+v, %v", again, err)
	}
	_, err = e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", a))
	wantCode(t, "same name, other volumes", err, codes.AlreadyExists)

	got, err := e.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: ids(gs.GetSnapshots()), Secrets: secrets})
	if err != nil || !slices.Equal(ids(got.GetGroupSnapshot().GetSnapshots()), ids(gs.GetSnapshots())) {
		t.Errorf("GetVolumeGroupSnapshot = %+v, %v", got, err)
	}
	_, err = e.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: []string{members[a].GetSnapshotId()}, Secrets: secrets})
	wantCode(t, "GetVolumeGroupSnapshot with a member missing", err, codes.InvalidArgument)

	// members are listed like any snapshot, with their group
	list, err := e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: members[a].GetSnapshotId(), Secrets: secrets})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetGroupSnapshotId() != gs.GetGroupSnapshotId() {
		t.Errorf("ListSnapshots by member ID = %+v, %v", list, err)
	}
	list, err = e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: b, Secrets: secrets})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetSnapshotId() != members[b].GetSnapshotId() {
		t.Errorf("ListSnapshots by source volume = %+v, %v", list, err)
	}
	_, err = e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: members[a].GetSnapshotId(), Secrets: secrets})
	wantCode(t, "DeleteSnapshot of a member", err, codes.InvalidArgument)

	// restore: the data at the group snapshot, not later writes; larger is fine, smaller not
	restored, err := e.client.CreateVolume(ctx, e.createReq("from-a", 12*mib, snapSource(members[a].GetSnapshotId())))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.read(t, restored.GetVolume().GetVolumeContext()["imageName"], 0, 8); string(got) != "a-before" {
		t.Errorf("volume restored from member a reads %q", got)
	}
	// a clone of the member where librbd clones by snapshot ID (rbd_clone4), else a copy
	clone4 := rbdcaps.Has(rbdcaps.Clone4)
	cephtest.Expect(t, rbdcaps.Clone4, clone4)
	if cloned := e.hasParent(t, restored.GetVolume().GetVolumeContext()["imageName"]); cloned != clone4 {
		t.Errorf("volume restored from a member has a parent: %v; librbd has rbd_clone4: %v", cloned, clone4)
	}
	_, err = e.client.CreateVolume(ctx, e.createReq("from-b-small", 8*mib, snapSource(members[b].GetSnapshotId())))
	wantCode(t, "restore into a smaller volume", err, codes.OutOfRange)

	// a volume deleted while a group snapshot has a member of it stays, hidden, for restores
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: b, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	restoredB, err := e.client.CreateVolume(ctx, e.createReq("from-b", 16*mib, snapSource(members[b].GetSnapshotId())))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.read(t, restoredB.GetVolume().GetVolumeContext()["imageName"], 0, 8); string(got) != "b-before" {
		t.Errorf("volume restored from member b (volume deleted) reads %q", got)
	}
	_, err = e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs2", a, b))
	wantCode(t, "group snapshot of a deleted volume", err, codes.NotFound)

	// attaching: a restored volume is an ordinary volume; the hidden source and a member's
	// snapshot ID name no volume that can be published
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(restoredB.GetVolume().GetVolumeId(), "node-a", snw, false)); err != nil {
		t.Errorf("publish of a volume restored from a member: %v", err)
	}
	if err := e.unpublish(t, restoredB.GetVolume().GetVolumeId(), "node-a"); err != nil {
		t.Errorf("unpublish of a volume restored from a member: %v", err)
	}
	_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(b, "node-a", snw, false))
	wantCode(t, "publish of a deleted volume a group snapshot keeps hidden", err, codes.NotFound)
	_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(members[a].GetSnapshotId(), "node-a", snw, false))
	wantCode(t, "publish of a member snapshot ID", err, codes.NotFound)

	// delete: a mismatched member list is refused, then everything goes, the hidden volume too
	_, err = e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: []string{members[b].GetSnapshotId()}, Secrets: secrets})
	wantCode(t, "DeleteVolumeGroupSnapshot with a member missing", err, codes.InvalidArgument)
	for range 2 {
		if _, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: ids(gs.GetSnapshots()), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	if imgs := e.images(t); slices.Contains(imgs, imgB) || len(e.groups(t)) != 0 {
		t.Errorf("after DeleteVolumeGroupSnapshot: images %v (hidden %s must go), groups %v", imgs, imgB, e.groups(t))
	}
	_, err = e.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), Secrets: secrets})
	wantCode(t, "GetVolumeGroupSnapshot after delete", err, codes.NotFound)
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: members[a].GetSnapshotId(), Secrets: secrets}); err != nil {
		t.Errorf("DeleteSnapshot of a deleted group's member: %v, want OK", err)
	}
	for _, v := range []string{a, restored.GetVolume().GetVolumeId(), restoredB.GetVolume().GetVolumeId()} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v, Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

func snapSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

// TestGroupSnapshotRequestErrors: bad requests get the spec's codes and leave nothing behind.
func TestGroupSnapshotRequestErrors(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	a, _ := e.volume(t, "a", 8*mib, nil)
	av := mustVol(t, a)
	missing := volid.RBDVolume{ClusterID: av.ClusterID, PoolID: av.PoolID, Namespace: av.Namespace, UID: "aaaaaaaaaaaaaaaa"}.String()
	otherNS := volid.RBDVolume{ClusterID: av.ClusterID, PoolID: av.PoolID, Namespace: av.Namespace + "x", UID: av.UID}.String()
	baseline := e.journalKeys(t)
	for _, tt := range []struct {
		name string
		req  *csi.CreateVolumeGroupSnapshotRequest
		want codes.Code
	}{
		{"no name", e.groupReq("", a), codes.InvalidArgument},
		{"no volumes", e.groupReq("g"), codes.InvalidArgument},
		{"a volume twice", e.groupReq("g", a, a), codes.InvalidArgument},
		{"malformed volume ID", e.groupReq("g", a, "not-a-volume"), codes.NotFound},
		{"unknown cluster", e.groupReq("g", strings.Replace(a, ":"+av.ClusterID+":", ":nowhere:", 1)), codes.NotFound},
		{"volume that does not exist", e.groupReq("g", a, missing), codes.NotFound},
		{"volumes in two namespaces", e.groupReq("g", a, otherNS), codes.FailedPrecondition},
		{"unknown parameter", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a}, Secrets: secrets, Parameters: map[string]string{"bogus": "1"}}, codes.InvalidArgument},
		{"other cluster in parameters", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a}, Secrets: secrets, Parameters: map[string]string{"clusterID": "other"}}, codes.InvalidArgument},
		{"other pool in parameters", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a}, Secrets: secrets, Parameters: map[string]string{"pool": "other"}}, codes.InvalidArgument},
	} {
		_, err := e.group.CreateVolumeGroupSnapshot(ctx, tt.req)
		wantCode(t, tt.name, err, tt.want)
	}
	if n := e.journalKeys(t); n != baseline || len(e.groups(t)) != 0 {
		t.Errorf("refused requests left %d journal keys (want %d) and groups %v", n, baseline, e.groups(t))
	}
	_, err := e.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{Secrets: secrets})
	wantCode(t, "Get without ID", err, codes.InvalidArgument)
	_, err = e.group.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: "garbage", Secrets: secrets})
	wantCode(t, "Get of a malformed ID", err, codes.NotFound)
	_, err = e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{Secrets: secrets})
	wantCode(t, "Delete without ID", err, codes.InvalidArgument)
	_, err = e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: "garbage", Secrets: secrets})
	wantCode(t, "Delete of a malformed ID", err, codes.OK)
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

// TestGroupSnapshotOfClones: members of clones and of volumes with snapshots of their own are
// found among the images' other snapshots, and restores of them hold the right data.
func TestGroupSnapshotOfClones(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	base, _ := e.volume(t, "base", 8*mib, bytes.Repeat([]byte("p"), 4096))
	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: base, Secrets: secrets})
	if err != nil {
		t.Fatal(err)
	}
	clone, err := e.client.CreateVolume(ctx, e.createReq("clone", 8*mib, snapSource(snap.GetSnapshot().GetSnapshotId())))
	if err != nil {
		t.Fatal(err)
	}
	cimg := clone.GetVolume().GetVolumeContext()["imageName"]
	e.write(t, cimg, 4096, []byte("child"))
	resp, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", base, clone.GetVolume().GetVolumeId()))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.GetGroupSnapshot().GetSnapshots() {
		if m.GetSourceVolumeId() != clone.GetVolume().GetVolumeId() {
			continue
		}
		r, err := e.client.CreateVolume(ctx, e.createReq("restored", 8*mib, snapSource(m.GetSnapshotId())))
		if err != nil {
			t.Fatal(err)
		}
		img := r.GetVolume().GetVolumeContext()["imageName"]
		if got := e.read(t, img, 0, 4096+5); !bytes.Equal(got[:4096], bytes.Repeat([]byte("p"), 4096)) || string(got[4096:]) != "child" {
			t.Errorf("restore of the clone's member lacks the parent's or the clone's data")
		}
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId(), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	// the CSI snapshot of base is untouched, and its own listing has no member mixed in
	list, err := e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: secrets})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetGroupSnapshotId() != "" {
		t.Errorf("ListSnapshots of the plain snapshot = %+v, %v", list, err)
	}
	if _, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: resp.GetGroupSnapshot().GetGroupSnapshotId(), Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	for _, del := range []func() error{
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: clone.GetVolume().GetVolumeId(), Secrets: secrets})
			return err
		},
		func() error {
			_, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: secrets})
			return err
		},
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: base, Secrets: secrets})
			return err
		},
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}
