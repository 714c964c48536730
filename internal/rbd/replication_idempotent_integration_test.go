package rbd

import (
	"context"
	"strings"
	"testing"
	"time"

	replpb "github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMirrorEnableDisableIdempotent: EnableVolumeReplication twice and
// DisableVolumeReplication on an image never mirrored or already disabled all succeed without
// changing anything (the CO repeats calls whose answers it lost); a secondary is not disabled
// without force; disabling the primary makes the peer's rbd-mirror remove its copy, and the
// volume can be mirrored again.
func TestMirrorEnableDisableIdempotent(t *testing.T) {
	cfg, a, b := mirrorSites(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	params := map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "1m"}
	vol := a.createVolume(ctx, t, "mirror-idem", cfg.Pool, 64<<20, params)
	disable := &replpb.DisableVolumeReplicationRequest{ReplicationSource: replSource(vol), Parameters: params, Secrets: a.secrets}
	notMirrored := func(when string) {
		t.Helper()
		_, err := a.repl.GetVolumeReplicationInfo(ctx, &replpb.GetVolumeReplicationInfoRequest{ReplicationSource: replSource(vol), Secrets: a.secrets})
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not mirrored") {
			t.Fatalf("GetVolumeReplicationInfo %s: %v, want FailedPrecondition: not mirrored", when, err)
		}
	}
	if _, err := a.repl.DisableVolumeReplication(ctx, disable); err != nil {
		t.Fatalf("DisableVolumeReplication of a volume never mirrored: %v", err)
	}
	notMirrored("after disabling a volume never mirrored")

	enable := &replpb.EnableVolumeReplicationRequest{ReplicationSource: replSource(vol), Parameters: params, Secrets: a.secrets}
	since := time.Now().Unix()
	for i := 1; i <= 2; i++ {
		if _, err := a.repl.EnableVolumeReplication(ctx, enable); err != nil {
			t.Fatalf("EnableVolumeReplication (call %d): %v", i, err)
		}
	}
	a.waitSynced(ctx, t, vol, since)

	if _, err := b.repl.DisableVolumeReplication(ctx, &replpb.DisableVolumeReplicationRequest{ReplicationSource: replSource(vol), Parameters: params, Secrets: b.secrets}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DisableVolumeReplication of the secondary on B without force: %v, want FailedPrecondition", err)
	}
	disabledAt := time.Now()
	for i := 1; i <= 2; i++ {
		if _, err := a.repl.DisableVolumeReplication(ctx, disable); err != nil {
			t.Fatalf("DisableVolumeReplication (call %d): %v", i, err)
		}
	}
	notMirrored("after disabling it twice")
	// B's rbd-mirror removes its copy
	for {
		p, _, _, err := b.ctrl.openVolume(ctx, vol, b.secrets)
		if err == nil {
			p.Conn.Release()
		}
		if status.Code(err) == codes.NotFound {
			t.Logf("MEASURED disable on A to B's copy removed: %v", time.Since(disabledAt).Round(time.Millisecond))
			break
		}
		if err != nil && !isNotFound(err) {
			t.Fatalf("B's copy: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("B's rbd-mirror never removed its copy after replication was disabled on A")
		}
		time.Sleep(500 * time.Millisecond)
	}
	// mirrored again, and synced again
	since = time.Now().Unix()
	if _, err := a.repl.EnableVolumeReplication(ctx, enable); err != nil {
		t.Fatalf("EnableVolumeReplication after disabling: %v", err)
	}
	a.waitSynced(ctx, t, vol, since)
}
