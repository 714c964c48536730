package rbd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	replpb "github.com/csi-addons/spec/lib/go/replication"
	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestParseReplParams(t *testing.T) {
	tests := []struct {
		name     string
		in       map[string]string
		mode     rbd.ImageMirrorMode
		interval string
		code     codes.Code
		want     string
	}{
		{"default snapshot", nil, rbd.ImageMirrorModeSnapshot, "", codes.OK, ""},
		{"snapshot with schedule", map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "5m", "schedulingStartTime": "14:00:00-05:00"}, rbd.ImageMirrorModeSnapshot, "5m", codes.OK, ""},
		{"journal", map[string]string{"mirroringMode": "journal"}, rbd.ImageMirrorModeJournal, "", codes.OK, ""},
		{"journal with schedule", map[string]string{"mirroringMode": "journal", "schedulingInterval": "1h"}, 0, "", codes.InvalidArgument, "snapshot mirroring only"},
		{"unknown mode", map[string]string{"mirroringMode": "pool"}, 0, "", codes.InvalidArgument, "want snapshot or journal"},
		{"bad interval", map[string]string{"schedulingInterval": "5s"}, 0, "", codes.InvalidArgument, "minutes, hours or days"},
		{"zero interval", map[string]string{"schedulingInterval": "0m"}, 0, "", codes.InvalidArgument, "minutes, hours or days"},
		{"start without interval", map[string]string{"schedulingStartTime": "14:00:00"}, 0, "", codes.InvalidArgument, "needs parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp, err := parseReplParams(tt.in)
			if status.Code(err) != tt.code || (tt.want != "" && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("error %v, want code %v containing %q", err, tt.code, tt.want)
			}
			if err == nil && (rp.mode != tt.mode || rp.interval != tt.interval) {
				t.Errorf("got mode %v interval %q, want %v %q", rp.mode, rp.interval, tt.mode, tt.interval)
			}
		})
	}
}

func TestForceParam(t *testing.T) {
	for in, want := range map[string]codes.Code{"": codes.OK, "true": codes.OK, "false": codes.OK, "yes": codes.InvalidArgument} {
		if _, err := forceParam(map[string]string{"force": in}); status.Code(err) != want {
			t.Errorf("force=%q: %v, want %v", in, err, want)
		}
	}
}

func TestSourceVolume(t *testing.T) {
	vol := func(id string) *replpb.ReplicationSource {
		return &replpb.ReplicationSource{Type: &replpb.ReplicationSource_Volume{Volume: &replpb.ReplicationSource_VolumeSource{VolumeId: id}}}
	}
	group := &replpb.ReplicationSource{Type: &replpb.ReplicationSource_Volumegroup{Volumegroup: &replpb.ReplicationSource_VolumeGroupSource{VolumeGroupId: "g"}}}
	tests := []struct {
		name string
		req  replRequest
		want string
		code codes.Code
	}{
		{"source", &replpb.PromoteVolumeRequest{ReplicationSource: vol("rv1:a:1::x")}, "rv1:a:1::x", codes.OK},
		{"old volume_id", &replpb.PromoteVolumeRequest{VolumeId: "rv1:a:1::y"}, "rv1:a:1::y", codes.OK},
		{"source wins", &replpb.PromoteVolumeRequest{VolumeId: "old", ReplicationSource: vol("new")}, "new", codes.OK},
		{"missing", &replpb.DemoteVolumeRequest{}, "", codes.InvalidArgument},
		{"destination info", &replpb.GetReplicationDestinationInfoRequest{ReplicationSource: vol("d")}, "d", codes.OK},
		{"group", &replpb.EnableVolumeReplicationRequest{ReplicationSource: group}, "", codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sourceVolume(tt.req)
			if status.Code(err) != tt.code || got != tt.want {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tt.want, tt.code)
			}
		})
	}
}

func TestReplicationInfo(t *testing.T) {
	local := rbd.SiteMirrorImageStatus{State: rbd.MirrorImageStatusStateStopped, Description: "local image is primary", Up: true}
	peer := func(state rbd.MirrorImageStatusState, up bool, desc string) rbd.SiteMirrorImageStatus {
		return rbd.SiteMirrorImageStatus{MirrorUUID: "u", State: state, Up: up, Description: desc}
	}
	synced := `replaying, {"bytes_per_second":0.0,"bytes_per_snapshot":0.0,"last_snapshot_bytes":4096,"last_snapshot_sync_seconds":3,"local_snapshot_timestamp":1795918757,"remote_snapshot_timestamp":1795918757,"replay_state":"idle"}`
	tests := []struct {
		name   string
		sites  []rbd.SiteMirrorImageStatus
		code   codes.Code
		status replpb.GetVolumeReplicationInfoResponse_Status
		synced bool // a last sync time is reported
	}{
		{"healthy", []rbd.SiteMirrorImageStatus{local, peer(rbd.MirrorImageStatusStateReplaying, true, synced)}, codes.OK, replpb.GetVolumeReplicationInfoResponse_HEALTHY, true},
		{"peer daemon down", []rbd.SiteMirrorImageStatus{local, peer(rbd.MirrorImageStatusStateReplaying, false, synced)}, codes.OK, replpb.GetVolumeReplicationInfoResponse_DEGRADED, true},
		{"peer error", []rbd.SiteMirrorImageStatus{local, peer(rbd.MirrorImageStatusStateError, true, "split-brain, "+synced[len("replaying, "):])}, codes.OK, replpb.GetVolumeReplicationInfoResponse_ERROR, true},
		{"split-brain, no JSON", []rbd.SiteMirrorImageStatus{local, peer(rbd.MirrorImageStatusStateStopped, true, "split-brain")}, codes.OK, replpb.GetVolumeReplicationInfoResponse_DEGRADED, false},
		{"error, no JSON", []rbd.SiteMirrorImageStatus{local, peer(rbd.MirrorImageStatusStateError, true, "error bootstrapping replay")}, codes.OK, replpb.GetVolumeReplicationInfoResponse_ERROR, false},
		{"no copy yet", []rbd.SiteMirrorImageStatus{local, peer(rbd.MirrorImageStatusStateStartingReplay, true, "starting replay")}, codes.OK, replpb.GetVolumeReplicationInfoResponse_DEGRADED, false},
		{"no peer", []rbd.SiteMirrorImageStatus{local}, codes.NotFound, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := replicationInfo("v", rbd.GlobalMirrorImageStatus{SiteStatuses: tt.sites})
			if status.Code(err) != tt.code {
				t.Fatalf("error %v, want %v", err, tt.code)
			}
			if err != nil {
				return
			}
			if resp.GetStatus() != tt.status {
				t.Errorf("status %v, want %v", resp.GetStatus(), tt.status)
			}
			if resp.GetStatusMessage() != tt.sites[1].Description {
				t.Errorf("message %q, want the peer's description %q", resp.GetStatusMessage(), tt.sites[1].Description)
			}
			if !tt.synced {
				if resp.GetLastSyncTime() != nil {
					t.Errorf("last sync time %v, want none", resp.GetLastSyncTime().AsTime())
				}
				return
			}
			if got := resp.GetLastSyncTime().AsTime(); !got.Equal(time.Unix(1795918757, 0)) || resp.GetLastSyncBytes() != 4096 || resp.GetLastSyncDuration().AsDuration() != 3*time.Second {
				t.Errorf("last sync %v, %d bytes, %v", got, resp.GetLastSyncBytes(), resp.GetLastSyncDuration().AsDuration())
			}
		})
	}
}

func TestResyncDecision(t *testing.T) {
	const idle = `replaying, {"replay_state":"idle","local_snapshot_timestamp":1700000000}`
	st := func(s rbd.MirrorImageStatusState, desc string) rbd.SiteMirrorImageStatus {
		return rbd.SiteMirrorImageStatus{State: s, Description: desc, Up: true}
	}
	tests := []struct {
		name        string
		local       rbd.SiteMirrorImageStatus
		lerr        error
		force       bool
		flag, ready bool
	}{
		{"replaying caught up, force", st(rbd.MirrorImageStatusStateReplaying, idle), nil, true, false, true},
		{"replaying caught up", st(rbd.MirrorImageStatusStateReplaying, idle), nil, false, false, true},
		{"replaying copying, force", st(rbd.MirrorImageStatusStateReplaying, `replaying, {"replay_state":"syncing"}`), nil, true, false, false},
		{"syncing after a flag, force", st(rbd.MirrorImageStatusStateSyncing, "bootstrapping, IMAGE_SYNC/COPY_IMAGE 12%"), nil, true, false, false},
		{"starting replay, force", st(rbd.MirrorImageStatusStateStartingReplay, "starting replay"), nil, true, false, false},
		{"split-brain", st(rbd.MirrorImageStatusStateStopped, "split-brain"), nil, false, true, false},
		{"error", st(rbd.MirrorImageStatusStateError, "remote image is not primary"), nil, false, true, false},
		{"stopped, force", st(rbd.MirrorImageStatusStateStopped, "stopped"), nil, true, true, false},
		{"stopped", st(rbd.MirrorImageStatusStateStopped, "stopped"), nil, false, false, false},
		{"no local status, force", rbd.SiteMirrorImageStatus{}, rbd.ErrNotExist, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flag, ready := resyncDecision(tt.local, tt.lerr, tt.force)
			if flag != tt.flag || ready != tt.ready {
				t.Errorf("flag %v ready %v, want %v %v", flag, ready, tt.flag, tt.ready)
			}
		})
	}
}

func TestPromoteRefused(t *testing.T) {
	local := rbd.SiteMirrorImageStatus{State: rbd.MirrorImageStatusStateReplaying, Up: true}
	peer := func(up bool) rbd.SiteMirrorImageStatus {
		return rbd.SiteMirrorImageStatus{MirrorUUID: "a-uuid", State: rbd.MirrorImageStatusStateStopped, Description: "local image is primary", Up: up}
	}
	tests := []struct {
		name  string
		sites []rbd.SiteMirrorImageStatus
		code  codes.Code
	}{
		{"peer up: planned migration, demotion not here yet", []rbd.SiteMirrorImageStatus{local, peer(true)}, codes.Unavailable},
		{"peer down: lost site", []rbd.SiteMirrorImageStatus{local, peer(false)}, codes.FailedPrecondition},
		{"no peer status", []rbd.SiteMirrorImageStatus{local}, codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := promoteRefused("vol", rbd.GlobalMirrorImageStatus{SiteStatuses: tt.sites}, rbd.ErrNotFound)
			if status.Code(err) != tt.code {
				t.Errorf("%v, want %v", err, tt.code)
			}
		})
	}
}

// TestMgrConnLazy: the manager connection is opened only by a schedule change that has a
// command to send (no interval: none), and its error is the RPC's.
func TestMgrConnLazy(t *testing.T) {
	calls := 0
	tg := &replTarget{image: "csi-vol-x", connectMgr: func(context.Context) (*ceph.Conn, error) {
		calls++
		return nil, status.Error(codes.Unavailable, "no manager")
	}}
	if err := tg.schedule(context.Background(), replParams{mode: rbd.ImageMirrorModeSnapshot}); err != nil || calls != 0 {
		t.Fatalf("schedule without interval: %v, %d connections; want none", err, calls)
	}
	if err := tg.schedule(context.Background(), replParams{mode: rbd.ImageMirrorModeSnapshot, interval: "1m"}); status.Code(err) != codes.Unavailable || calls != 1 {
		t.Fatalf("schedule: %v, %d connections; want the connection's Unavailable after 1", err, calls)
	}
	if err := tg.unschedule(context.Background()); status.Code(err) != codes.Unavailable || calls != 2 {
		t.Fatalf("unschedule: %v, %d connections; want the connection's Unavailable after 2", err, calls)
	}
}

// TestScheduleReplaces: setting a schedule first removes the image's schedules (the manager's
// "add" appends, so a new interval would otherwise keep the old one firing); an image without
// one (ENOENT) is no error; a failing removal adds nothing.
func TestScheduleReplaces(t *testing.T) {
	tests := []struct {
		name      string
		removeErr error
		want      []string
		code      codes.Code
	}{
		{"replaces", nil, []string{"rbd mirror snapshot schedule remove", "rbd mirror snapshot schedule add 2h"}, codes.OK},
		{"none before", ceph.ErrNotFound, []string{"rbd mirror snapshot schedule remove", "rbd mirror snapshot schedule add 2h"}, codes.OK},
		{"removal fails", status.Error(codes.Unavailable, "mgr down"), []string{"rbd mirror snapshot schedule remove"}, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent []string
			tg := &replTarget{image: "csi-vol-x", sendMgr: func(_ context.Context, cmd map[string]any) error {
				p := cmd["prefix"].(string)
				if iv, ok := cmd["interval"]; ok {
					p += " " + iv.(string)
				}
				sent = append(sent, p)
				if strings.HasSuffix(p, "remove") {
					return tt.removeErr
				}
				return nil
			}}
			err := tg.schedule(context.Background(), replParams{mode: rbd.ImageMirrorModeSnapshot, interval: "2h"})
			if status.Code(err) != tt.code || strings.Join(sent, ";") != strings.Join(tt.want, ";") {
				t.Errorf("%v, sent %q; want %v, %q", err, sent, tt.code, tt.want)
			}
		})
	}
}
