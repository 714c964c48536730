package cephfs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/reftracker"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// snapFixture is a volume with a file and a snapshot of it.
type snapFixture struct {
	vol     *csi.Volume
	snap    *csi.Snapshot
	snapUID string
	sub     string
}

func (e *env) fixture(t testing.TB, root string) snapFixture {
	t.Helper()
	ctx := ctxT(t)
	vol := e.create(t, e.createReq("source", 8*mib, rwx, nil))
	if root != "" {
		if err := os.WriteFile(filepath.Join(root, vol.GetVolumeContext()["rootPath"], "data.txt"), []byte("snapshot data"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: vol.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := volid.ParseCephFSSnapshot(resp.GetSnapshot().GetSnapshotId())
	if err != nil {
		t.Fatal(err)
	}
	return snapFixture{vol: vol, snap: resp.GetSnapshot(), snapUID: id.SnapUID, sub: strings.Split(vol.GetVolumeContext()["rootPath"], "/")[3]}
}

func (e *env) tracker(t testing.TB, uid string) reftracker.State {
	t.Helper()
	st, err := reftracker.Get(context.Background(), e.loc(), uid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) snapshotExists(t testing.TB, f snapFixture) bool {
	t.Helper()
	_, err := e.fsa.SubVolumeSnapshotInfo(e.cl.FSName, e.group, f.sub, snapName(f.snapUID))
	if err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func uidOf(t testing.TB, volumeID string) string {
	v, err := volid.ParseCephFSVolume(volumeID)
	if err != nil {
		t.Fatal(err)
	}
	return v.UID
}

func TestShallowVolumes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	root := mountRoot(t)
	f := e.fixture(t, root)
	if st := e.tracker(t, f.snapUID); strings.Join(st.Refs, ",") != snapshotRef {
		t.Fatalf("tracker after CreateSnapshot = %+v", st)
	}
	before := e.subvolumes(t)

	sh := e.create(t, e.createReq("shallow", 8*mib, rox, snapSource(f.snap.GetSnapshotId())))
	vc := sh.GetVolumeContext()
	if sh.GetCapacityBytes() != 0 || vc["shallow"] != "true" || vc["snapshotName"] != snapName(f.snapUID) || vc["rootPath"] != f.vol.GetVolumeContext()["rootPath"] {
		t.Fatalf("shallow volume = %+v", sh)
	}
	if got := e.subvolumes(t); len(got) != len(before) {
		t.Fatalf("a shallow volume created a subvolume: %v", got)
	}
	snapDir := filepath.Join(root, filepath.Dir(vc["rootPath"]), ".snap", vc["snapshotName"], filepath.Base(vc["rootPath"]), "data.txt")
	if b, err := os.ReadFile(snapDir); err != nil || string(b) != "snapshot data" {
		t.Fatalf("the snapshot the context names: %q, %v", b, err)
	}
	if again := e.create(t, e.createReq("shallow", 8*mib, rox, snapSource(f.snap.GetSnapshotId()))); again.GetVolumeId() != sh.GetVolumeId() {
		t.Fatal("repeat made another volume")
	}
	if st := e.tracker(t, f.snapUID); len(st.Refs) != 2 {
		t.Fatalf("after a repeated create: %+v, want 2 references", st)
	}
	sh2 := e.create(t, e.createReq("shallow-of-shallow", 8*mib, rox, volSource(sh.GetVolumeId())))
	if sh2.GetVolumeContext()["snapshotName"] != vc["snapshotName"] || len(e.tracker(t, f.snapUID).Refs) != 3 {
		t.Fatalf("shallow from shallow: %+v, tracker %+v", sh2, e.tracker(t, f.snapUID))
	}
	full := e.create(t, e.createReq("regular-of-shallow", 8*mib, rwx, volSource(sh.GetVolumeId())))
	if b, err := os.ReadFile(filepath.Join(root, full.GetVolumeContext()["rootPath"], "data.txt")); err != nil || string(b) != "snapshot data" || full.GetVolumeContext()["shallow"] != "" {
		t.Fatalf("regular volume from a shallow one: %q %v %+v", b, err, full)
	}
	copyRO := e.create(t, e.createReq("full-ro", 8*mib, rox, snapSource(f.snap.GetSnapshotId()), "backingSnapshot", "false"))
	if copyRO.GetVolumeContext()["shallow"] != "" || copyRO.GetCapacityBytes() != 8*mib {
		t.Fatalf("backingSnapshot=false gave %+v", copyRO)
	}
	if _, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "of-shallow", SourceVolumeId: sh.GetVolumeId(), Secrets: e.cl.Secrets()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("snapshot of a shallow volume: %v", err)
	}
	if _, err := e.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: sh.GetVolumeId(), CapacityRange: &csi.CapacityRange{RequiredBytes: mib}, Secrets: e.cl.Secrets()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("expand of a shallow volume: %v", err)
	}

	// DeleteSnapshot succeeds while shallow volumes use it; the snapshot stays for them
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: f.snap.GetSnapshotId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	if !e.snapshotExists(t, f) || len(e.tracker(t, f.snapUID).Refs) != 2 {
		t.Fatalf("after DeleteSnapshot: exists=%v tracker %+v", e.snapshotExists(t, f), e.tracker(t, f.snapUID))
	}
	if _, err := e.client.CreateVolume(ctx, e.createReq("too-late", mib, rox, snapSource(f.snap.GetSnapshotId()))); status.Code(err) != codes.NotFound {
		t.Fatalf("shallow volume of a deleted snapshot: %v", err)
	}
	// the source subvolume goes too (retained snapshots); the shallow volumes keep the snapshot
	for _, v := range []*csi.Volume{f.vol, full, copyRO, sh} {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	if !e.snapshotExists(t, f) {
		t.Fatal("the snapshot went while a shallow volume still references it")
	}
	// the last reference takes snapshot and tracker with it
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: sh2.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	if e.snapshotExists(t, f) || e.tracker(t, f.snapUID).Exists {
		t.Fatal("snapshot or tracker left after the last reference")
	}
	e.assertEmpty(t)
}

func TestShallowFromLegacySnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	f := e.fixture(t, "")
	// a snapshot from before reference trackers: no tracker object
	if err := e.io.Delete(reftracker.ObjectName(f.snapUID)); err != nil {
		t.Fatal(err)
	}
	sh := e.create(t, e.createReq("legacy", mib, rox, snapSource(f.snap.GetSnapshotId())))
	if st := e.tracker(t, f.snapUID); strings.Join(st.Refs, ",") != snapshotRef+","+volumeRef(uidOf(t, sh.GetVolumeId())) {
		t.Fatalf("legacy initialisation = %+v", st)
	}
	for _, req := range []func() error{
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: sh.GetVolumeId(), Secrets: e.cl.Secrets()})
			return err
		},
		func() error {
			_, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: f.snap.GetSnapshotId(), Secrets: e.cl.Secrets()})
			return err
		},
		func() error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: f.vol.GetVolumeId(), Secrets: e.cl.Secrets()})
			return err
		},
	} {
		if err := req(); err != nil {
			t.Fatal(err)
		}
	}
	e.assertEmpty(t)
}

// TestShallowConcurrencyProperty: 16 goroutines × 500 operations mixing shallow creates and
// deletes with random delays, and one DeleteSnapshot in the middle. Afterwards the tracker
// counts exactly the live shallow volumes, the snapshot exists iff references remain, and every
// create that succeeded holds a reference (none succeeded against a removed snapshot).
func TestShallowConcurrencyProperty(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	f := e.fixture(t, "")
	const workers, ops = 16, 500
	var (
		mu          sync.Mutex
		live        = map[string]string{} // volume ID → name
		done        atomic.Int64
		deleted     atomic.Bool
		createdLate atomic.Int64 // creates that succeeded after DeleteSnapshot returned
		notFound    atomic.Int64
	)
	retry := func(call func() error) error {
		for {
			err := call()
			if status.Code(err) != codes.Aborted {
				return err
			}
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			for i := range ops {
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				if n := done.Add(1); n == workers*ops*2/5 {
					if err := retry(func() error {
						_, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: f.snap.GetSnapshotId(), Secrets: e.cl.Secrets()})
						return err
					}); err != nil {
						t.Errorf("DeleteSnapshot: %v", err)
					}
					deleted.Store(true)
					continue
				}
				// delete often before the snapshot is deleted, rarely after, so that volumes
				// both come and go around the deletion and survive it
				deleteOdds := 40
				if deleted.Load() {
					deleteOdds = 3
				}
				if len(mine) > 0 && rand.IntN(100) < deleteOdds {
					id := mine[len(mine)-1]
					mine = mine[:len(mine)-1]
					if err := retry(func() error {
						_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()})
						return err
					}); err != nil {
						t.Errorf("DeleteVolume: %v", err)
						return
					}
					mu.Lock()
					delete(live, id)
					mu.Unlock()
					continue
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				wasDeleted := deleted.Load()
				var resp *csi.CreateVolumeResponse
				err := retry(func() error {
					var err error
					resp, err = e.client.CreateVolume(ctx, e.createReq(name, mib, rox, snapSource(f.snap.GetSnapshotId())))
					return err
				})
				switch {
				case status.Code(err) == codes.NotFound:
					notFound.Add(1)
				case err != nil:
					t.Errorf("CreateVolume: %v", err)
					return
				default:
					if wasDeleted {
						createdLate.Add(1)
					}
					mine = append(mine, resp.GetVolume().GetVolumeId())
					mu.Lock()
					live[resp.GetVolume().GetVolumeId()] = name
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(live) == 0 {
		t.Fatal("no shallow volume survived: the run did not exercise a snapshot kept for its references")
	}
	st := e.tracker(t, f.snapUID)
	if len(st.Refs) != len(live) {
		t.Fatalf("tracker holds %d references, %d shallow volumes live", len(st.Refs), len(live))
	}
	for id := range live {
		if !strings.Contains(strings.Join(st.Refs, ","), volumeRef(uidOf(t, id))) {
			t.Fatalf("live volume %s has no reference", id)
		}
	}
	if !e.snapshotExists(t, f) {
		t.Fatal("shallow volumes live but their snapshot is gone")
	}
	if createdLate.Load() != 0 {
		t.Fatalf("%d shallow creates succeeded after DeleteSnapshot returned", createdLate.Load())
	}
	t.Logf("%d operations: %d shallow volumes live at the end, %d creates refused after the snapshot was deleted",
		workers*ops, len(live), notFound.Load())
	// drain: deleting the survivors removes snapshot and tracker with the last one
	for id := range live {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	if e.snapshotExists(t, f) || e.tracker(t, f.snapUID).Exists {
		t.Fatal("snapshot or tracker left after the last shallow volume")
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: f.vol.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
