package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/benchstat"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
)

// BenchmarkStageUnstage times NodeStageVolume, NodeUnstageVolume and the remount of a volume
// whose ceph-fuse daemon was killed (NodePublishVolume repairing it), next to the floor
// measured in the same run: ceph-fuse mounting the same subvolume without the driver, and
// unmounting it until its daemon is gone.
func BenchmarkStageUnstage(b *testing.B) {
	env := cephtest.Env(b)
	group := testGroup(b, env)
	root := subvolume(b, env, group, "bench", 64<<20)
	n := newTestNode(b, env, "bench")
	ctx := context.Background()
	const rounds = 8
	timed := func(op func() error) time.Duration {
		start := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}

	x := hostexec.New(30 * time.Second)
	f := mount.NewFuse(x, 15*time.Second)
	r := mount.Request{Monitors: []string{env.Monitors}, FSName: env.FSName, Path: root, Cred: env.Admin,
		Target: filepath.Join(n.dir, "floor"), WorkDir: filepath.Join(n.opts.StateDir, "floor")}
	for _, d := range []string{r.Target, r.WorkDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	var fuseMount, fuseUnmount, stage, unstage, remount benchstat.Samples
	for range rounds {
		fuseMount = append(fuseMount, timed(func() error { return f.Mount(ctx, r) }))
		fuseUnmount = append(fuseUnmount, timed(func() error {
			if err := hostmount.UnmountOrDetach(ctx, x, r.Target); err != nil {
				return err
			}
			return f.Release(ctx, r.WorkDir)
		}))
	}
	const vol = "vol-bench"
	vc := volumeContext(env, root, nil)
	for range rounds {
		stage = append(stage, timed(func() error { return n.stage(b, vol, vc, rwx) }))
		unstage = append(unstage, timed(func() error {
			_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: n.stagingPath(vol)})
			return err
		}))
	}
	if err := n.stage(b, vol, vc, rwx); err != nil {
		b.Fatal(err)
	}
	if err := n.publish(b, vol, "pod", rwx, false, nil); err != nil {
		b.Fatal(err)
	}
	for range rounds {
		n.killDaemon(b, vol)
		remount = append(remount, timed(func() error { return n.publish(b, vol, "pod", rwx, false, nil) }))
	}
	n.unpublish(b, vol, "pod")
	n.unstage(b, vol)

	row := func(name string, s benchstat.Samples, floor *benchstat.Row) benchstat.Row {
		var wall time.Duration // sequential: the sum of the samples
		for _, d := range s {
			wall += d
		}
		return benchstat.Row{Name: name, Samples: s, Wall: wall, Floor: floor}
	}
	mountFloor, unmountFloor := row("ceph-fuse mount", fuseMount, nil), row("umount + daemon exit", fuseUnmount, nil)
	benchstat.Report(b,
		mountFloor,
		row("NodeStageVolume", stage, &mountFloor),
		row("remount after kill (publish)", remount, &mountFloor),
		unmountFloor,
		row("NodeUnstageVolume", unstage, &unmountFloor),
	)
}
