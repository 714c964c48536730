package node

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/rbd/attach"
)

// TestFrozenRbdFuseIsUnresponsive stops the FUSE server of a staged volume while the test keeps
// its connection (what the node plugin does while the mount holder restarts): 100 concurrent
// NodeGetVolumeHealth calls report it Unresponsive by their deadline (alive but not answering:
// not DaemonGone, which would invite a remount under it), and the process does not gain a
// thread per call. Resumed through the kept connection, the volume is healthy again.
func TestFrozenRbdFuseIsUnresponsive(t *testing.T) {
	r := newRig(t)
	img := r.image("", 16*mib)
	vol := "vol-" + img.Name
	base := r.workspace(vol)
	staging := filepath.Join(base, "staging")
	if err := r.stage(vol, staging, img, blockCap(rwo)); err != nil {
		t.Fatal(err)
	}
	health := func(ctx context.Context) (string, error) {
		h, err := r.s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol})
		if err != nil {
			return "", err
		}
		if e := h.GetVolumeHealth().GetHealthStatuses(); len(e) == 1 {
			return e[0].GetReason(), nil
		}
		return "healthy", nil
	}
	if got, err := health(r.ctx); got != "healthy" || err != nil {
		t.Fatalf("health before the freeze: %s, %v", got, err)
	}
	rec, err := r.s.findRecord(vol, "")
	if err != nil || rec == nil {
		t.Fatalf("record: %v, %v", rec, err)
	}
	conn, err := r.fuse().Connection(rec.Attachment.FuseDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.File.Close() })
	if err := r.fuse().Stop(r.ctx, rec.Attachment.FuseDir); err != nil {
		t.Fatal(err)
	}
	before := cephtest.Threads(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	reasons := map[string]int{}
	start := time.Now()
	for range 100 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
			defer cancel()
			got, err := health(ctx)
			if err != nil {
				got = err.Error()
			}
			mu.Lock()
			reasons[got]++
			mu.Unlock()
		})
	}
	wg.Wait()
	grew := cephtest.Threads(t) - before
	t.Logf("100 health calls on a stopped FUSE server: %v in %v; threads %d → %d", reasons, time.Since(start).Round(time.Millisecond), before, before+grew)
	if reasons["Unresponsive"] != 100 {
		t.Errorf("health of a stopped FUSE server: %v, want Unresponsive for all", reasons)
	}
	if grew > 12 {
		t.Errorf("the process gained %d threads over 100 calls", grew)
	}
	if _, err := r.fuse().Attach(r.ctx, attach.Request{Image: img, MonHost: r.cl.Monitors, Cred: r.cl.Admin,
		WorkDir: rec.Attachment.WorkDir, Resume: conn}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := health(r.ctx)
		if got == "healthy" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health after the server resumed: %s, %v", got, err)
		}
	}
	if err := r.unstage(vol, staging); err != nil {
		t.Fatal(err)
	}
}
