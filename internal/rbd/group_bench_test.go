package rbd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/benchstat"
	"github.com/monoceph/monoceph/internal/rbd/rbdcaps"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
)

// samples times op n times, one call after the other, running cleanup (untimed) after each:
// restores hold data, and memstore keeps it in RAM.
func samples(b *testing.B, n int, op func(i int) error, cleanup func(i int) error) benchstat.Row {
	b.Helper()
	row := benchstat.Row{Samples: make(benchstat.Samples, n)}
	for i := range n {
		t0 := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		row.Samples[i] = time.Since(t0)
		row.Wall += row.Samples[i]
		if err := cleanup(i); err != nil {
			b.Fatal(err)
		}
	}
	return row
}

// BenchmarkGroupSnapshotRestore measures what a restore from a group snapshot member costs —
// a copy of the member's data where librbd cannot clone from it (Pacific, Reef), a clone by
// snapshot ID where it can (Squid and later) — next to the clone a plain CSI snapshot's
// restore is, each against its floor measured in the same run: librbd's own copy (rbd_copy2
// from the member opened by ID) or clone by ID (rbd_clone4), and clone (rbd_clone3 of the plain
// snapshot), on an open connection. It also measures CreateVolumeGroupSnapshot of two volumes
// against librbd's group snapshot steps. The source holds 16 MiB of data in a 64 MiB image.
func BenchmarkGroupSnapshotRestore(b *testing.B) {
	e := newEnvIn(b, "")
	ctx := context.Background()
	secrets := e.cl.Secrets()
	const n, size = 10, 64 << 20
	mk := func(name string) (string, string) {
		resp, err := e.client.CreateVolume(ctx, e.createReq(name, size, nil))
		if err != nil {
			b.Fatal(err)
		}
		return resp.GetVolume().GetVolumeId(), resp.GetVolume().GetVolumeContext()["imageName"]
	}
	src, srcImg := mk("source")
	other, _ := mk("other")
	img, err := rbd.OpenImage(e.io, srcImg, rbd.NoSnapshot)
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	for off := int64(0); off < size; off += 4 << 20 { // 1 MiB in every 4 MiB object
		if _, err := img.WriteAt(chunk, off); err != nil {
			b.Fatal(err)
		}
	}
	img.Close()
	gs, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq("bench", src, other))
	if err != nil {
		b.Fatal(err)
	}
	var member string
	for _, m := range gs.GetGroupSnapshot().GetSnapshots() {
		if m.GetSourceVolumeId() == src {
			member = m.GetSnapshotId()
		}
	}
	plain, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "plain", SourceVolumeId: src, Secrets: secrets})
	if err != nil {
		b.Fatal(err)
	}
	mid, _ := volid.ParseRBDSnapshot(member)
	pid, _ := volid.ParseRBDSnapshot(plain.GetSnapshot().GetSnapshotId())
	opts, err := imageOptions(DefaultImageFeatures, "")
	if err != nil {
		b.Fatal(err)
	}
	defer opts.Destroy()
	remove := func(name string) func(int) error {
		return func(i int) error { return rbd.RemoveImage(e.io, fmt.Sprintf("%s-%d", name, i)) }
	}
	restored := make([]string, n)
	deleteRestored := func(i int) error {
		_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: restored[i], Secrets: secrets})
		return err
	}
	restore := func(prefix, snap string) func(int) error {
		return func(i int) error {
			r, err := e.client.CreateVolume(ctx, e.createReq(fmt.Sprintf("%s-%d", prefix, i), size, snapSource(snap)))
			restored[i] = r.GetVolume().GetVolumeId()
			return err
		}
	}

	// the member restore's floor is what librbd does for it here: a clone by snapshot ID
	// where it has rbd_clone4, else a copy
	memberSnap := func() (uint64, error) {
		s, err := rbd.OpenImageReadOnly(e.io, srcImg, rbd.NoSnapshot)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		info, _, err := rbdname.MemberSnapshot(s, mid.PoolID, mid.SnapUID)
		return info.Id, err
	}
	cloneByID := rbdcaps.Has(rbdcaps.Clone4)
	b.ResetTimer()
	memberFloor := samples(b, n, func(i int) error {
		name := fmt.Sprintf("member-floor-%d", i)
		id, err := memberSnap()
		if err != nil {
			return err
		}
		if cloneByID {
			if err := opts.SetUint64(rbd.ImageOptionCloneFormat, 2); err != nil {
				return err
			}
			return rbd.CloneImageByID(e.io, srcImg, id, e.io, name, opts)
		}
		if err := rbd.CreateImage(e.io, name, size, opts); err != nil {
			return err
		}
		s, err := rbd.OpenImageReadOnly(e.io, srcImg, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.SetSnapByID(id); err != nil {
			return err
		}
		d, err := rbd.OpenImage(e.io, name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer d.Close()
		return s.Copy2(d)
	}, remove("member-floor"))
	fromMember := samples(b, n, restore("member", member), deleteRestored)
	cloneFloor := samples(b, n, func(i int) error {
		return rbd.CloneImage(e.io, srcImg, rbdname.Snapshot(pid.SnapUID), e.io, fmt.Sprintf("clone-floor-%d", i), opts)
	}, remove("clone-floor"))
	fromSnapshot := samples(b, n, restore("plain", plain.GetSnapshot().GetSnapshotId()), deleteRestored)

	groupFloor := samples(b, n, func(i int) error {
		g := fmt.Sprintf("floor-group-%d", i)
		if err := rbd.GroupCreate(e.io, g); err != nil {
			return err
		}
		for _, v := range []string{src, other} {
			if err := rbd.GroupImageAdd(e.io, g, e.io, rbdname.Image(mustVolB(b, v).UID)); err != nil {
				return err
			}
		}
		if err := rbd.GroupSnapCreate(e.io, g, "s"); err != nil {
			return err
		}
		for _, v := range []string{src, other} {
			if err := rbd.GroupImageRemove(e.io, g, e.io, rbdname.Image(mustVolB(b, v).UID)); err != nil {
				return err
			}
		}
		return nil
	}, func(i int) error { return rbd.GroupRemove(e.io, fmt.Sprintf("floor-group-%d", i)) })
	groups := make([]string, n)
	group := samples(b, n, func(i int) error {
		r, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq(fmt.Sprintf("g-%d", i), src, other))
		groups[i] = r.GetGroupSnapshot().GetGroupSnapshotId()
		return err
	}, func(i int) error {
		_, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: groups[i], Secrets: secrets})
		return err
	})
	b.StopTimer()

	memberFloor.Name, fromMember.Name = "librbd copy2 of member", "CreateVolume from member (copy)"
	if cloneByID {
		memberFloor.Name, fromMember.Name = "librbd clone4 of member", "CreateVolume from member (clone)"
	}
	cloneFloor.Name, groupFloor.Name = "librbd clone of snapshot", "librbd group snapshot"
	fromMember.Floor = &memberFloor
	fromSnapshot.Name, fromSnapshot.Floor = "CreateVolume from snapshot", &cloneFloor
	vsSnapshot := fromMember
	vsSnapshot.Name, vsSnapshot.Floor = "  same, vs snapshot restore", &fromSnapshot
	group.Name, group.Floor = "CreateVolumeGroupSnapshot x2", &groupFloor
	benchstat.Report(b, memberFloor, fromMember, cloneFloor, fromSnapshot, vsSnapshot, groupFloor, group)

	if _, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshot().GetGroupSnapshotId(), Secrets: secrets}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: plain.GetSnapshot().GetSnapshotId(), Secrets: secrets}); err != nil {
		b.Fatal(err)
	}
}

func mustVolB(b *testing.B, id string) volid.RBDVolume {
	v, err := volid.ParseRBDVolume(id)
	if err != nil {
		b.Fatal(err)
	}
	return v
}
