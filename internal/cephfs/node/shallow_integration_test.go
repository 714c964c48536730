package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/nodestate"
	"google.golang.org/grpc/codes"
)

// TestShallowVolume: files written to a subvolume and snapshotted are readable through a
// shallow volume, which rejects writes with EROFS, reports nothing available, and keeps
// working after the source subvolume is removed with its snapshots retained.
func TestShallowVolume(t *testing.T) {
	env := cephtest.Env(t)
	group := testGroup(t, env)
	root := subvolume(t, env, group, "source", 64<<20)
	n := newTestNode(t, env, "node")
	ctx := context.Background()

	// write through a regular volume
	if err := n.stage(t, "source", volumeContext(env, root, nil), rwx); err != nil {
		t.Fatal(err)
	}
	if err := n.publish(t, "source", "writer", rwx, false, nil); err != nil {
		t.Fatal(err)
	}
	src := n.targetPath("source", "writer")
	mustWrite(t, filepath.Join(src, "a.txt"), "snapshotted")
	if err := os.MkdirAll(filepath.Join(src, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "data", "b.txt"), "deeper")
	cephCLI(t, "fs", "subvolume", "snapshot", "create", env.FSName, "source", "snap1", "--group_name", group)
	mustWrite(t, filepath.Join(src, "a.txt"), "changed after the snapshot")
	n.unpublish(t, "source", "writer")
	n.unstage(t, "source")

	shallowCtx := func(rootPath, snap string) map[string]string {
		return volumeContext(env, rootPath, func(v *volumecontext.Volume) { v.Shallow, v.SnapshotName = true, snap })
	}
	const vol = "vol-shallow"
	// usage: CephFS's recursive statistics of a snapshot whose subvolume was removed read 0
	check := func(t *testing.T, vol, pod, file, want string, usage bool) {
		t.Helper()
		// a writer access mode still publishes read-only: a shallow volume is a snapshot
		if err := n.publish(t, vol, pod, rwx, false, nil); err != nil {
			t.Fatalf("NodePublishVolume: %v", err)
		}
		target := n.targetPath(vol, pod)
		mustRead(t, filepath.Join(target, file), want)
		wantEROFS(t, filepath.Join(target, file))
		wantEROFS(t, filepath.Join(target, "new"))
		st, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: target})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range st.GetUsage() {
			if u.GetAvailable() != 0 || u.GetTotal() != u.GetUsed() || usage && u.GetUsed() <= 0 {
				t.Fatalf("stats of a shallow volume: %v", st)
			}
		}
	}

	t.Run("driver subvolume", func(t *testing.T) {
		if err := n.stage(t, vol, shallowCtx(root, "snap1"), readerRO); err != nil {
			t.Fatalf("NodeStageVolume: %v", err)
		}
		rec, err := readRecord(n.stagingPath(vol))
		if err != nil || rec.MountedPath != filepath.Dir(root) || rec.Shallow.SnapshotDir != filepath.Join(".snap", "snap1", filepath.Base(root)) {
			t.Fatalf("record: %+v, %v", rec, err)
		}
		check(t, vol, "reader", "a.txt", "snapshotted", true)
		// the staging mount of the parent is read-only too
		wantEROFS(t, filepath.Join(n.stagingPath(vol), "x"))
	})

	t.Run("pre-provisioned root path", func(t *testing.T) {
		// a static volume on <uuid>/data: the snapshot of the subvolume shows there under
		// its inherited name, _snap1_<inode>
		const pvol = "vol-static"
		if err := n.stage(t, pvol, shallowCtx(root+"/data", "snap1"), readerRO); err != nil {
			t.Fatalf("NodeStageVolume: %v", err)
		}
		check(t, pvol, "reader", "b.txt", "deeper", true)
		n.unpublish(t, pvol, "reader")
		n.unstage(t, pvol)
	})

	t.Run("missing snapshot", func(t *testing.T) {
		wantCode(t, n.stage(t, "vol-nosnap", shallowCtx(root, "nosuchsnap"), readerRO), codes.NotFound, `snapshot "nosuchsnap" does not exist`)
		if _, err := os.Stat(nodestate.RecordPath(n.stagingPath("vol-nosnap"))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("record after a failed stage: %v", err)
		}
	})

	t.Run("source removed, snapshot retained", func(t *testing.T) {
		n.unpublish(t, vol, "reader")
		n.unstage(t, vol)
		cephCLI(t, "fs", "subvolume", "rm", env.FSName, "source", "--group_name", group, "--retain-snapshots")
		if err := n.stage(t, vol, shallowCtx(root, "snap1"), readerRO); err != nil {
			t.Fatalf("NodeStageVolume after the source was removed: %v", err)
		}
		check(t, vol, "reader2", "a.txt", "snapshotted", false)
		// and it survives its daemon
		n.killDaemon(t, vol)
		if err := n.publish(t, vol, "reader2", readerRO, true, nil); err != nil {
			t.Fatalf("NodePublishVolume on a broken shallow mount: %v", err)
		}
		mustRead(t, filepath.Join(n.targetPath(vol, "reader2"), "a.txt"), "snapshotted")
		wantEROFS(t, filepath.Join(n.targetPath(vol, "reader2"), "a.txt"))
		n.unpublish(t, vol, "reader2")
		n.unstage(t, vol)
	})
}
