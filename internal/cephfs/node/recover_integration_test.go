package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/oplock"
	"k8s.io/apimachinery/pkg/util/wait"
)

// countingExec runs commands on the host and counts the runs of one of them.
type countingExec struct {
	hostexec.Executor
	name string
	runs atomic.Int32
}

func (c *countingExec) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if name == c.name {
		c.runs.Add(1)
	}
	return c.Executor.Run(ctx, name, args...)
}

// TestRecoverRetriesWhileCephIsUnreachable: the plugin restarts (its ceph-fuse daemons die
// with it) while the node cannot reach the cluster: the monitors in its cluster map do not
// answer. Recover's first remount fails; it must try again with backoff, without blocking
// anything, and repair the volume, publish target included, once the monitors answer, instead
// of giving up after one try and leaving the pod on a dead mount.
func TestRecoverRetriesWhileCephIsUnreachable(t *testing.T) {
	env := cephtest.Env(t)
	group := testGroup(t, env)
	root := subvolume(t, env, group, "unreachable", 16<<20)
	dir := t.TempDir()
	mapFile := env.ClusterMapFile(t, dir, "")
	clusters, err := clustermap.Load(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 8 * time.Second // ceph-fuse gives up connecting after half of it
	x := &countingExec{Executor: hostexec.New(timeout), name: "ceph-fuse"}
	state := stateDir(t)
	s, err := newServer(Options{NodeID: "node", StateDir: state, Clusters: clusters, Locks: oplock.New(), Timeout: timeout,
		RecoverBackoff: wait.Backoff{Duration: time.Second, Factor: 1.5, Cap: 3 * time.Second, Steps: 100}},
		x, mount.NewFuse(x, timeout/2), mount.NewKernelWith(x, filepath.Join(dir, "no-filesystems")))
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{Server: s, env: env, dir: t.TempDir(), name: "node"}
	t.Cleanup(func() { cleanupMounts(t, n.dir, state) })
	const vol = "vol-unreachable"
	ctx := context.Background()
	if err := n.stage(t, vol, volumeContext(env, root, nil), rwx); err != nil {
		t.Fatal(err)
	}
	if err := n.publish(t, vol, "pod", rwx, false, nil); err != nil {
		t.Fatal(err)
	}
	n.killDaemon(t, vol)

	// the monitors do not answer (nothing listens there); the store notices a new mtime
	writeMap := func(monitor string, mtime time.Time) {
		t.Helper()
		body := fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q]}]`, env.ID, monitor)
		if err := os.WriteFile(mapFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(mapFile, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	writeMap("127.0.0.1:1", time.Now().Add(-time.Hour))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := clusters.Cluster(env.ID); err == nil && c.Monitors[0] == "127.0.0.1:1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cluster map store did not pick up the unreachable monitor")
		}
	}
	before := x.runs.Load()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		done <- n.Recover(rctx)
	}()
	// the monitors come back while Recover is under way: after its first remount has failed
	for deadline := time.Now().Add(time.Minute); x.runs.Load() == before; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Recover never ran ceph-fuse")
		}
	}
	time.Sleep(timeout/2 + time.Second) // the first ceph-fuse gives up connecting
	select {
	case err := <-done:
		t.Fatalf("Recover returned while the monitors did not answer: %v", err)
	default:
	}
	writeMap(env.Monitors, time.Now())
	if err := <-done; err != nil {
		t.Fatalf("Recover after the monitors came back: %v", err)
	}
	runs := x.runs.Load() - before
	t.Logf("Recover repaired the volume after %d ceph-fuse runs in %v", runs, time.Since(start).Round(time.Millisecond))
	if runs < 2 {
		t.Fatalf("ceph-fuse ran %d times: the unreachable cluster was never tried", runs)
	}
	target := n.targetPath(vol, "pod")
	mustWrite(t, filepath.Join(target, "after"), "recovered")
	mustRead(t, filepath.Join(n.stagingPath(vol), "after"), "recovered")
	n.unpublish(t, vol, "pod")
	n.unstage(t, vol)
}
