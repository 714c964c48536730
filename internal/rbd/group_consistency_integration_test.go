package rbd

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
)

// TestGroupSnapshotIsOnePointInTime cuts group snapshots while one writer stores a counter in
// volume a, then the same counter in volume b, each write flushed before the next: at any one
// point in time a holds the counter b holds or the one after it. Every group snapshot's
// members, and the volumes restored from them, must hold such a pair.
func TestGroupSnapshotIsOnePointInTime(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	secrets := e.cl.Secrets()
	a, imgA := e.volume(t, "a", 8*mib, nil)
	b, imgB := e.volume(t, "b", 8*mib, nil)

	var written atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var imgs [2]*rbd.Image
		for i, name := range []string{imgA, imgB} {
			img, err := rbd.OpenImage(e.io, name, rbd.NoSnapshot)
			if err != nil {
				t.Error(err)
				return
			}
			defer img.Close()
			imgs[i] = img
		}
		buf := make([]byte, 8)
		for n := uint64(1); ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			binary.BigEndian.PutUint64(buf, n)
			for _, img := range imgs {
				if _, err := img.WriteAt(buf, 0); err != nil {
					t.Error(err)
					return
				}
				if err := img.Flush(); err != nil {
					t.Error(err)
					return
				}
			}
			written.Store(n)
		}
	}()
	var groups []*csi.VolumeGroupSnapshot
	for _, name := range []string{"gs-1", "gs-2", "gs-3"} {
		for start := written.Load(); written.Load() < start+20; {
			time.Sleep(10 * time.Millisecond) // the writer is running
		}
		resp, err := e.group.CreateVolumeGroupSnapshot(ctx, e.groupReq(name, a, b))
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatal(err)
		}
		groups = append(groups, resp.GetGroupSnapshot())
	}
	close(stop)
	wg.Wait()
	t.Logf("the writer stored %d counters in each volume", written.Load())

	counter := func(image string, snapID *uint64) uint64 {
		t.Helper()
		img, err := rbd.OpenImageReadOnly(e.io, image, rbd.NoSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		defer img.Close()
		if snapID != nil {
			if err := img.SetSnapByID(*snapID); err != nil {
				t.Fatal(err)
			}
		}
		buf := make([]byte, 8)
		if _, err := img.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		return binary.BigEndian.Uint64(buf)
	}
	consistent := func(what string, na, nb uint64) {
		t.Helper()
		if na != nb && na != nb+1 {
			t.Errorf("%s: a holds %d, b holds %d: not one point in time", what, na, nb)
		}
	}
	var last uint64
	for _, gs := range groups {
		gid, _ := volid.ParseRBDGroupSnapshot(gs.GetGroupSnapshotId())
		// the members themselves, read at their snapshot IDs
		at := map[string]uint64{}
		for _, img := range []string{imgA, imgB} {
			h, err := rbd.OpenImageReadOnly(e.io, img, rbd.NoSnapshot)
			if err != nil {
				t.Fatal(err)
			}
			s, ok, err := rbdname.MemberSnapshot(h, gid.PoolID, gid.UID)
			h.Close()
			if err != nil || !ok {
				t.Fatalf("member of %s in %s: %v, %v", gs.GetGroupSnapshotId(), img, ok, err)
			}
			at[img] = counter(img, &s.Id)
		}
		consistent("members of "+gs.GetGroupSnapshotId(), at[imgA], at[imgB])
		if at[imgB] <= last {
			t.Errorf("group snapshots in order hold counters %d then %d: the writer did not run between them", last, at[imgB])
		}
		last = at[imgB]
		// and the volumes restored from them
		got := map[string]uint64{}
		for _, m := range gs.GetSnapshots() {
			r, err := e.client.CreateVolume(ctx, e.createReq("restore-"+m.GetSnapshotId()[len(m.GetSnapshotId())-8:]+m.GetSourceVolumeId()[len(m.GetSourceVolumeId())-4:], 8*mib, snapSource(m.GetSnapshotId())))
			if err != nil {
				t.Fatal(err)
			}
			got[m.GetSourceVolumeId()] = counter(r.GetVolume().GetVolumeContext()["imageName"], nil)
			if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: r.GetVolume().GetVolumeId(), Secrets: secrets}); err != nil {
				t.Fatal(err)
			}
		}
		if got[a] != at[imgA] || got[b] != at[imgB] {
			t.Errorf("restored volumes hold %d and %d, their members %d and %d", got[a], got[b], at[imgA], at[imgB])
		}
		t.Logf("%s: a=%d b=%d", gs.GetGroupSnapshotId(), at[imgA], at[imgB])
		if _, err := e.group.DeleteVolumeGroupSnapshot(ctx, &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(), Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{a, b} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v, Secrets: secrets}); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}
