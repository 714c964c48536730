package cephfs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func (e *env) groupReq(name string, ids ...string) *csi.CreateVolumeGroupSnapshotRequest {
	return &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: ids, Secrets: e.cl.Secrets()}
}

// snapshotsOf lists the Ceph snapshots of a volume's subvolume.
func (e *env) snapshotsOf(t testing.TB, v *csi.Volume) []string {
	t.Helper()
	id, err := volid.ParseCephFSVolume(v.GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := e.fsa.ListSubVolumeSnapshots(e.cl.FSName, e.group, subvolumeName(id.UID))
	if err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
	return snaps
}

func managerHasQuiesce(t testing.TB, e *env) bool {
	t.Helper()
	cl, err := e.ctrl.Clusters.Cluster(e.cl.ID)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.ctrl.openSite(ctxT(t), cl, e.cl.Secrets(), e.cl.FSName, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer s.release()
	ok, err := e.ctrl.canQuiesce(ctxT(t), e.cl.ID, s)
	if err != nil {
		t.Fatal(err)
	}
	// the controller keeps the answer: a test that then puts squidMgr in its place must be
	// asked anew
	e.ctrl.quiesce.mu.Lock()
	e.ctrl.quiesce.known = nil
	e.ctrl.quiesce.mu.Unlock()
	return ok
}

// TestGroupSnapshotNeedsQuiesce: on a manager without `fs quiesce` (before Ceph 19.2) a group
// snapshot is FAILED_PRECONDITION naming what is missing, and nothing is reserved.
func TestGroupSnapshotNeedsQuiesce(t *testing.T) {
	e := newEnv(t)
	if managerHasQuiesce(t, e) {
		t.Skip("this cluster's manager has fs quiesce: TestGroupSnapshotLifecycle covers it")
	}
	ctx := ctxT(t)
	a := e.create(t, e.createReq("a", 8*mib, rwx, nil))
	before := e.objects(t)
	_, err := e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq("g", a.GetVolumeId()))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "fs quiesce") {
		t.Errorf("group snapshot without fs quiesce: %v, want FAILED_PRECONDITION naming fs quiesce", err)
	}
	if after := e.objects(t); !slices.Equal(before, after) || len(e.snapshotsOf(t, a)) != 0 {
		t.Errorf("the refused request changed the journal (%v → %v) or cut snapshots", before, after)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

// TestGroupSnapshotLifecycle drives a CephFS group snapshot through a manager that has
// `fs quiesce` (the real one on Ceph 19.2+, played by squidMgr on older clusters, which the
// release tier tells apart with MONOCEPH_EXPECT=fs_quiesce): both subvolumes paused in one set,
// every member cut while paused, the set released with its version; members are ordinary
// snapshots (listed with their group, cloned and served as shallow volumes), refused by
// DeleteSnapshot, and gone with DeleteVolumeGroupSnapshot.
func TestGroupSnapshotLifecycle(t *testing.T) {
	e := newEnv(t)
	fake := newSquidMgr()
	fake.passthrough = managerHasQuiesce(t, e)
	cephtest.Expect(t, "fs_quiesce", fake.passthrough)
	e.ctrl.mgr = fake
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	root := mountRoot(t)
	a := e.create(t, e.createReq("a", 8*mib, rwx, nil))
	b := e.create(t, e.createReq("b", 16*mib, rwx, nil))
	for _, v := range []*csi.Volume{a, b} {
		if err := os.WriteFile(filepath.Join(root, v.GetVolumeContext()["rootPath"], "data"), []byte("at the cut"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", b.GetVolumeId(), a.GetVolumeId()))
	if err != nil {
		t.Fatal(err)
	}
	gs := resp.GetGroupSnapshot()
	if _, err := volid.ParseCephFSGroupSnapshot(gs.GetGroupSnapshotId()); err != nil || !gs.GetReadyToUse() || len(gs.GetSnapshots()) != 2 {
		t.Fatalf("group snapshot %+v (%v)", gs, err)
	}
	for _, v := range []*csi.Volume{a, b} {
		if err := os.WriteFile(filepath.Join(root, v.GetVolumeContext()["rootPath"], "data"), []byte("later"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// one set paused both subvolumes, and was released, with its version, after every cut
	calls := fake.calls()
	if len(calls) != 2 || calls[0].op != "quiesce" || calls[1].op != "release" || calls[0].set != calls[1].set ||
		len(calls[0].members) != 2 || calls[1].version != calls[0].answered || calls[1].version == 0 || calls[0].timeout != "60.0" {
		t.Fatalf("quiesce calls %+v, want one quiesce of both members (timeout as a float literal) and one release of that version", calls)
	}
	for _, m := range gs.GetSnapshots() {
		if m.GetGroupSnapshotId() != gs.GetGroupSnapshotId() || !m.GetReadyToUse() {
			t.Errorf("member %+v", m)
		}
		// the volumes module stamps snapshots in whole microseconds, the quiesce calls are
		// timed with more: compare at that resolution
		at := m.GetCreationTime().AsTime()
		if at.Before(calls[0].at.Truncate(time.Second)) || at.After(calls[1].at.Add(time.Second)) {
			t.Errorf("member %s cut at %v, outside the quiesce set's [%v, %v]", m.GetSnapshotId(), at, calls[0].at, calls[1].at)
		}
	}
	sizes := map[string]int64{}
	for _, m := range gs.GetSnapshots() {
		sizes[m.GetSourceVolumeId()] = m.GetSizeBytes()
	}
	if sizes[a.GetVolumeId()] != 8*mib || sizes[b.GetVolumeId()] != 16*mib {
		t.Errorf("member sizes %v", sizes)
	}

	again, err := e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", a.GetVolumeId(), b.GetVolumeId()))
	if err != nil || again.GetGroupSnapshot().GetGroupSnapshotId() != gs.GetGroupSnapshotId() || len(fake.calls()) != 2 {
		t.Errorf("repeated create = %+v, %v (and %d quiesce calls, want no new ones)", again, err, len(fake.calls()))
	}
	_, err = e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", a.GetVolumeId()))
	wantCode(t, "same name, other volumes", err, codes.AlreadyExists)
	ids := memberSnapshotIDs(gs)
	got, err := e.gsc.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: ids, Secrets: secrets})
	if err != nil || len(got.GetGroupSnapshot().GetSnapshots()) != 2 {
		t.Errorf("GetVolumeGroupSnapshot = %+v, %v", got, err)
	}
	_, err = e.gsc.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: ids[:1], Secrets: secrets})
	wantCode(t, "GetVolumeGroupSnapshot with a member missing", err, codes.InvalidArgument)
	list, err := e.client.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: ids[0], Secrets: secrets})
	if err != nil || len(list.GetEntries()) != 1 || list.GetEntries()[0].GetSnapshot().GetGroupSnapshotId() != gs.GetGroupSnapshotId() {
		t.Errorf("ListSnapshots of a member = %+v, %v", list, err)
	}
	_, err = e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: ids[0], Secrets: secrets})
	wantCode(t, "DeleteSnapshot of a member", err, codes.InvalidArgument)

	// members restore like any snapshot: a clone, and a shallow read-only volume
	var memberA string
	for _, m := range gs.GetSnapshots() {
		if m.GetSourceVolumeId() == a.GetVolumeId() {
			memberA = m.GetSnapshotId()
		}
	}
	clone := e.create(t, e.createReq("clone", 8*mib, rwx, snapSource(memberA)))
	if data, err := os.ReadFile(filepath.Join(root, clone.GetVolumeContext()["rootPath"], "data")); err != nil || string(data) != "at the cut" {
		t.Errorf("clone of member a reads %q, %v", data, err)
	}
	shallow := e.create(t, e.createReq("shallow", 8*mib, rox, snapSource(memberA)))
	if shallow.GetVolumeContext()["shallow"] != "true" {
		t.Errorf("read-only volume from a member is not shallow: %v", shallow.GetVolumeContext())
	}

	_, err = e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: ids[1:], Secrets: secrets})
	wantCode(t, "DeleteVolumeGroupSnapshot with a member missing", err, codes.InvalidArgument)
	for range 2 {
		if _, err := e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), SnapshotIds: ids, Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	// the shallow volume keeps member a's Ceph snapshot; member b's went
	if n, m := len(e.snapshotsOf(t, a)), len(e.snapshotsOf(t, b)); n != 1 || m != 0 {
		t.Errorf("after DeleteVolumeGroupSnapshot: %d snapshots of a (a shallow volume uses one), %d of b; want 1 and 0", n, m)
	}
	_, err = e.gsc.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), Secrets: secrets})
	wantCode(t, "GetVolumeGroupSnapshot after delete", err, codes.NotFound)
	for _, v := range []*csi.Volume{shallow, clone, a, b} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

// TestGroupSnapshotReleaseFails: a set that is not quiesced any more at release (expired,
// cancelled) means the members may not be of one point in time: the driver removes them and
// answers ABORTED, and the CO's retry cuts them anew in a new set.
func TestGroupSnapshotReleaseFails(t *testing.T) {
	e := newEnv(t)
	fake := newSquidMgr()
	e.ctrl.mgr = fake
	ctx := ctxT(t)
	a := e.create(t, e.createReq("a", 8*mib, rwx, nil))
	b := e.create(t, e.createReq("b", 8*mib, rwx, nil))
	fake.releaseAs = "EXPIRED"
	_, err := e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", a.GetVolumeId(), b.GetVolumeId()))
	wantCode(t, "release of an expired set", err, codes.Aborted)
	if n, m := len(e.snapshotsOf(t, a)), len(e.snapshotsOf(t, b)); n+m != 0 {
		t.Errorf("%d and %d member snapshots left after the failed release", n, m)
	}
	fake.mu.Lock()
	fake.releaseAs = ""
	fake.mu.Unlock()
	resp, err := e.gsc.CreateVolumeGroupSnapshot(ctx, e.groupReq("gs", a.GetVolumeId(), b.GetVolumeId()))
	if err != nil {
		t.Fatal(err)
	}
	calls := fake.calls()
	if n := len(calls); n < 4 || calls[n-2].op != "quiesce" || calls[n-2].set == calls[0].set {
		t.Errorf("the retry did not quiesce in a new set: %+v", calls)
	}
	if _, err := e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: resp.GetGroupSnapshot().GetGroupSnapshotId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []*csi.Volume{a, b} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

// TestGroupSnapshotRequestErrors: requests that cannot succeed get the spec's codes before
// anything is reserved.
func TestGroupSnapshotRequestErrors(t *testing.T) {
	e := newEnv(t)
	e.ctrl.mgr = newSquidMgr()
	ctx := ctxT(t)
	a := e.create(t, e.createReq("a", 8*mib, rwx, nil))
	av, _ := volid.ParseCephFSVolume(a.GetVolumeId())
	missing := volid.CephFSVolume{ClusterID: av.ClusterID, FSCID: av.FSCID, UID: "aaaaaaaaaaaaaaaa"}.String()
	otherFS := volid.CephFSVolume{ClusterID: av.ClusterID, FSCID: av.FSCID + 1, UID: av.UID}.String()
	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: a.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	shallow := e.create(t, e.createReq("shallow", 8*mib, rox, snapSource(snap.GetSnapshot().GetSnapshotId())))
	before := e.objects(t)
	for _, c := range []struct {
		name string
		req  *csi.CreateVolumeGroupSnapshotRequest
		want codes.Code
	}{
		{"no name", e.groupReq("", a.GetVolumeId()), codes.InvalidArgument},
		{"no volumes", e.groupReq("g"), codes.InvalidArgument},
		{"malformed volume", e.groupReq("g", "nope"), codes.NotFound},
		{"missing volume", e.groupReq("g", a.GetVolumeId(), missing), codes.NotFound},
		{"two filesystems", e.groupReq("g", a.GetVolumeId(), otherFS), codes.FailedPrecondition},
		{"shallow volume", e.groupReq("g", a.GetVolumeId(), shallow.GetVolumeId()), codes.InvalidArgument},
		{"unknown parameter", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a.GetVolumeId()}, Secrets: e.cl.Secrets(), Parameters: map[string]string{"pool": "x"}}, codes.InvalidArgument},
		{"other filesystem in parameters", &csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: []string{a.GetVolumeId()}, Secrets: e.cl.Secrets(), Parameters: map[string]string{"fsName": "other"}}, codes.InvalidArgument},
	} {
		_, err := e.gsc.CreateVolumeGroupSnapshot(ctx, c.req)
		wantCode(t, c.name, err, c.want)
	}
	if after := e.objects(t); !slices.Equal(before, after) {
		t.Errorf("refused requests changed the journal: %v → %v", before, after)
	}
	_, err = e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{Secrets: e.cl.Secrets()})
	wantCode(t, "Delete without ID", err, codes.InvalidArgument)
	_, err = e.gsc.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: "nope", Secrets: e.cl.Secrets()})
	wantCode(t, "Delete of a malformed ID", err, codes.OK)
	_, err = e.gsc.GetVolumeGroupSnapshot(ctx, &csi.GetVolumeGroupSnapshotRequest{GroupSnapshotId: "nope", Secrets: e.cl.Secrets()})
	wantCode(t, "Get of a malformed ID", err, codes.NotFound)
	for _, del := range []func() error{
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: shallow.GetVolumeId(), Secrets: e.cl.Secrets()})
			return err
		},
		func() error {
			_, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: e.cl.Secrets()})
			return err
		},
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a.GetVolumeId(), Secrets: e.cl.Secrets()})
			return err
		},
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}
