package cephfs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestClonesBeyondTheClonerThreads restores one snapshot 12 times at once, three times the
// volumes module's 4 cloner threads. Reef 18.2.4 and later refuse a clone while every thread is
// busy (mgr/volumes/snapshot_clone_no_wait, true by default: EAGAIN "all cloner threads are
// busy"); Pacific queues it (pending). Either way every answer is one a CO retries (ABORTED
// while the clone copies, UNAVAILABLE while the threads are busy, saying so), never another
// error; the retries converge, and after deleting the volumes nothing is left.
func TestClonesBeyondTheClonerThreads(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src := e.create(t, e.createReq("src", 64*mib, rwx, nil))
	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: src.GetVolumeId(), Secrets: e.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	var (
		mu      sync.Mutex
		answers = map[string]int{}
		busy    string
		ids     []string
		wg      sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := e.createReq(fmt.Sprintf("restore-%d", i), 64*mib, rwx, snapSource(snap.GetSnapshot().GetSnapshotId()))
			for {
				resp, err := e.client.CreateVolume(ctx, req)
				mu.Lock()
				answers[status.Code(err).String()]++
				if err == nil {
					ids = append(ids, resp.GetVolume().GetVolumeId())
					mu.Unlock()
					return
				}
				if status.Code(err) == codes.Unavailable {
					busy = status.Convert(err).Message()
				}
				mu.Unlock()
				if c := status.Code(err); c != codes.Aborted && c != codes.Unavailable || ctx.Err() != nil {
					t.Errorf("CreateVolume(%s): %v; want ABORTED or UNAVAILABLE until it succeeds", req.GetName(), err)
					return
				}
				time.Sleep(500 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	t.Logf("answers over %d restores of one snapshot: %v; busy: %q", n, answers, busy)
	if busy != "" && !strings.Contains(busy, "cloner threads") {
		t.Errorf("UNAVAILABLE says %q; want it to name the busy cloner threads", busy)
	}
	if len(ids) != n {
		t.Fatalf("%d of %d restores completed", len(ids), n)
	}
	for _, id := range append(ids, src.GetVolumeId()) {
		if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.client.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}

	e.assertEmpty(t)
}
