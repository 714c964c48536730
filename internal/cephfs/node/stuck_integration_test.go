package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFrozenDaemonDoesNotPileUpThreads freezes (SIGSTOP) the ceph-fuse daemon of a staged and
// published volume: every stat, statfs or getxattr of its mount then waits in the kernel for
// as long as the daemon is stopped, holding a thread. 200 concurrent NodeGetVolumeStats calls
// (and a few NodeGetVolumeHealth calls) must all answer UNAVAILABLE by their deadline, and the
// process must not gain a thread per call: one call per path waits, the others are turned away.
// Resumed, the daemon answers again and the statistics come back.
func TestFrozenDaemonDoesNotPileUpThreads(t *testing.T) {
	env := cephtest.Env(t)
	group := testGroup(t, env)
	root := subvolume(t, env, group, "frozen", 16<<20)
	n := newTestNode(t, env, "node")
	const vol = "vol-frozen"
	ctx := context.Background()
	if err := n.stage(t, vol, volumeContext(env, root, nil), rwx); err != nil {
		t.Fatal(err)
	}
	if err := n.publish(t, vol, "pod", rwx, false, nil); err != nil {
		t.Fatal(err)
	}
	paths := []string{n.targetPath(vol, "pod"), n.stagingPath(vol)}
	stats := func(ctx context.Context, path string) error {
		_, err := n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: path})
		return err
	}
	for _, p := range paths {
		if err := stats(ctx, p); err != nil {
			t.Fatalf("stats before the freeze: %v", err)
		}
	}

	before := cephtest.Threads(t)
	resume := cephtest.Freeze(t, n.daemon(t, vol))

	const calls = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[codes.Code]int{}
	var health []string
	start := time.Now()
	for i := range calls {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			code := status.Code(stats(cctx, paths[i%len(paths)]))
			mu.Lock()
			got[code]++
			mu.Unlock()
		})
		if i%50 == 0 {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				h, err := n.NodeGetVolumeHealth(cctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: paths[0]})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					health = append(health, err.Error())
				} else if e := h.GetVolumeHealth().GetHealthStatuses(); len(e) == 1 {
					health = append(health, e[0].GetReason())
				} else {
					health = append(health, "healthy")
				}
			})
		}
	}
	wg.Wait()
	took := time.Since(start)
	grew := cephtest.Threads(t) - before
	t.Logf("%d calls on a frozen mount: %v in %v; health %v; threads %d → %d",
		calls, got, took.Round(time.Millisecond), health, before, before+grew)
	if got[codes.Unavailable] != calls {
		t.Errorf("answers %v, want UNAVAILABLE for all %d", got, calls)
	}
	for _, h := range health {
		if h != "Unresponsive" {
			t.Errorf("health of a frozen mount: %s, want Unresponsive", h)
		}
	}
	if took > 10*time.Second {
		t.Errorf("the calls took %v: they must end at their 3 s deadline", took)
	}
	// one stuck call per path, plus the runtime's own threads coming and going
	if grew > 2*len(paths)+10 {
		t.Errorf("the process gained %d threads over %d calls on a frozen mount", grew, calls)
	}

	resume()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := stats(ctx, paths[0])
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats after the daemon resumed: %v", err)
		}
	}
	n.unpublish(t, vol, "pod")
	n.unstage(t, vol)
}
