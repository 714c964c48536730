package rbd

import (
	"os"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"google.golang.org/grpc/codes"
)

// TestGroupCrashSafety kills the controller after each step of CreateVolumeGroupSnapshot,
// of a restore from a member and of DeleteVolumeGroupSnapshot: a retry completes with one
// group snapshot whose members hold the data at the cut, and deleting leaves no group, group
// snapshot, image snapshot or journal key. A volume deleted between the kill and the retry
// makes the retry fail for good and take everything the killed call made with it.
func TestGroupCrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	a, imgA := e.volume(t, "a", 8*mib, []byte("a-at-cut"))
	b, imgB := e.volume(t, "b", 8*mib, []byte("b-at-cut"))
	baseline := e.journalKeys(t)

	for _, point := range []string{"rbd.CreateVolumeGroupSnapshot.reserved", "rbd.CreateVolumeGroupSnapshot.grouped", "rbd.CreateVolumeGroupSnapshot.cut"} {
		t.Run(point, func(t *testing.T) {
			name := "crash-" + point
			runChild(t, crashOp{Kind: "group-snapshot", Name: name, IDs: []string{a, b}, NS: e.ns}, point)
			resp, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq(name, a, b))
			if err != nil || len(resp.GetGroupSnapshot().GetSnapshots()) != 2 {
				t.Fatalf("retry after kill: %+v, %v", resp, err)
			}
			for _, img := range []string{imgA, imgB} {
				if g := e.memberOf(t, img); g != "" {
					t.Errorf("image %s still a member of %s after the retry", img, g)
				}
			}
			if n := len(e.groups(t)); n != 1 {
				t.Errorf("%d groups after the retry, want 1: %v", n, e.groups(t))
			}
			gs := resp.GetGroupSnapshot()
			runChild(t, crashOp{Kind: "delete-group-snapshot", ID: gs.GetGroupSnapshotId(), NS: e.ns}, "rbd.DeleteVolumeGroupSnapshot.removed")
			if _, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), Secrets: secrets}); err != nil {
				t.Fatal(err)
			}
			e.assertOnly(t, sorted(imgA, imgB), baseline)
			if g := e.groups(t); len(g) != 0 {
				t.Errorf("groups left: %v", g)
			}
		})
	}

	t.Run("restore from a member", func(t *testing.T) {
		copyPoints := []string{"rbd.CreateVolume.copy-created", "rbd.CreateVolume.copied"}
		if rbdcaps.Has(rbdcaps.Clone4) {
			t.Skip("librbd clones members here: the clone's kill points are TestCrashSafety's")
		}
		resp, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("restore", a, b))
		if err != nil {
			t.Fatal(err)
		}
		gs := resp.GetGroupSnapshot()
		for _, member := range gs.GetSnapshots() {
			want := map[string]string{a: "a-at-cut", b: "b-at-cut"}[member.GetSourceVolumeId()]
			rp := copyPoints[0]
			if member.GetSourceVolumeId() == b {
				rp = copyPoints[1]
			}
			rname := "restore-" + rp
			runChild(t, crashOp{Kind: "create", Name: rname, SrcSn: member.GetSnapshotId(), NS: e.ns}, rp)
			r, err := e.client.CreateVolume(ctx, e.createReq(rname, 8*mib, snapSource(member.GetSnapshotId())))
			if err != nil {
				t.Fatalf("restore retry after kill at %s: %v", rp, err)
			}
			if got := e.read(t, r.GetVolume().GetVolumeContext()["imageName"], 0, len(want)); string(got) != want {
				t.Errorf("restore completed after a kill at %s reads %q, want %q", rp, got, want)
			}
			if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId(), Secrets: secrets}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
		e.assertOnly(t, sorted(imgA, imgB), baseline)
	})

	// killed while c is a group member (grouped: no member snapshot yet, so librbd refuses
	// to remove c with EMLINK; cut: c has a member snapshot and is kept hidden)
	for _, point := range []string{"rbd.CreateVolumeGroupSnapshot.grouped", "rbd.CreateVolumeGroupSnapshot.cut"} {
		t.Run("source deleted before the retry/"+point, func(t *testing.T) {
			c, imgC := e.volume(t, "c-"+point, 8*mib, nil)
			name := "crash-then-delete-" + point
			runChild(t, crashOp{Kind: "group-snapshot", Name: name, IDs: []string{a, c}, NS: e.ns}, point)
			if g := e.memberOf(t, imgC); g == "" {
				t.Fatalf("the killed call left %s in no group: the scenario needs it a member", imgC)
			}
			if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: c, Secrets: secrets}); err != nil {
				t.Fatalf("DeleteVolume of a volume a killed group snapshot left in its group: %v", err)
			}
			_, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq(name, a, c))
			wantCode(t, "retry with a source deleted meanwhile", err, codes.NotFound)
			if imgs := e.images(t); slices.Contains(imgs, imgC) {
				t.Errorf("the deleted volume's image %s stayed after the failed retry removed the group snapshot", imgC)
			}
			e.assertOnly(t, sorted(imgA, imgB), baseline)
			if g := e.groups(t); len(g) != 0 {
				t.Errorf("groups left: %v", g)
			}
		})
	}

	for _, v := range []string{a, b} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v, Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}
