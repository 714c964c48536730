package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/oplock"
	"google.golang.org/grpc/codes"
)

func TestNewChecksOptions(t *testing.T) {
	clusters, locks := testClusterMap(t), oplock.New()
	good := Options{NodeID: "n", StateDir: stateDir(t), Clusters: clusters, Locks: locks}
	tests := []struct {
		name string
		mod  func(*Options)
		msg  string
	}{
		{"node ID", func(o *Options) { o.NodeID = "" }, "node ID"},
		{"state dir", func(o *Options) { o.StateDir = "" }, "state directory"},
		{"relative state dir", func(o *Options) { o.StateDir = "state" }, "state directory"},
		{"state dir too long for admin sockets", func(o *Options) { o.StateDir = "/" + strings.Repeat("s", 80) }, "too long"},
		{"cluster map", func(o *Options) { o.Clusters = nil }, "cluster map"},
		{"locks", func(o *Options) { o.Locks = nil }, "locks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := good
			tt.mod(&o)
			if _, err := New(o); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("New = %v, want an error about %s", err, tt.msg)
			}
		})
	}
	s, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(good.StateDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state directory: %v, %v", fi.Mode(), err)
	}
	if s.opts.Timeout != DefaultTimeout {
		t.Fatalf("timeout %v", s.opts.Timeout)
	}
}

func TestCapabilitiesAndInfo(t *testing.T) {
	s, _ := newUnitServer(t, false)
	caps, err := s.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []csi.NodeServiceCapability_RPC_Type
	for _, c := range caps.GetCapabilities() {
		got = append(got, c.GetRpc().GetType())
	}
	want := []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("capabilities %v, want %v", got, want)
	}
	info, err := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "node-1" {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
}

func TestMounterChoice(t *testing.T) {
	tests := []struct {
		name          string
		kernelHasCeph bool
		requested     string
		want          string
		code          codes.Code
	}{
		{name: "node's choice without kernel CephFS", requested: "", want: mount.NameFuse},
		{name: "node's choice with kernel CephFS", kernelHasCeph: true, requested: "", want: mount.NameKernel},
		{name: "fuse", kernelHasCeph: true, requested: "fuse", want: mount.NameFuse},
		{name: "kernel", kernelHasCeph: true, requested: "kernel", want: mount.NameKernel},
		{name: "kernel missing", requested: "kernel", code: codes.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newUnitServer(t, tt.kernelHasCeph)
			m, err := s.mounter(context.Background(), tt.requested)
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, `mounter "kernel" is not available`)
				return
			}
			if err != nil || m.Name() != tt.want {
				t.Fatalf("mounter(%q) = %v, %v; want %s", tt.requested, m, err, tt.want)
			}
		})
	}
}

// TestStageKernelUnavailable: a volume that asks for the kernel client on a node without it
// fails with FAILED_PRECONDITION naming the mounter, and leaves nothing behind.
func TestStageKernelUnavailable(t *testing.T) {
	s, x := newUnitServer(t, false)
	staging := filepath.Join(t.TempDir(), "staging")
	vc := testContext()
	vc["mounter"] = "kernel"
	_, err := s.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "vol-1", StagingTargetPath: staging, Secrets: testSecrets(), VolumeContext: vc,
		VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
	})
	wantCode(t, err, codes.FailedPrecondition, `mounter "kernel" is not available on this node`)
	if _, err := os.Stat(nodestate.RecordPath(staging)); !os.IsNotExist(err) {
		t.Errorf("staging record: %v", err)
	}
	for _, c := range x.calls {
		if !strings.HasPrefix(c, "modprobe") {
			t.Errorf("ran %q", c)
		}
	}
}

func TestUnknownClusterIsFailedPrecondition(t *testing.T) {
	s, _ := newUnitServer(t, false)
	vc := testContext()
	vc["clusterID"] = "elsewhere"
	_, err := s.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: "vol-1", StagingTargetPath: t.TempDir(), Secrets: testSecrets(), VolumeContext: vc,
		VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER),
	})
	wantCode(t, err, codes.FailedPrecondition, `clusterID "elsewhere"`)
}

func TestNotStaged(t *testing.T) {
	s, _ := newUnitServer(t, false)
	ctx := context.Background()
	dir := t.TempDir()
	_, err := s.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: "vol-1", StagingTargetPath: filepath.Join(dir, "s"),
		TargetPath: filepath.Join(dir, "t"), VolumeCapability: mountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)})
	wantCode(t, err, codes.FailedPrecondition, "is not staged")
	_, err = s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: filepath.Join(dir, "t")})
	wantCode(t, err, codes.NotFound, "is not staged")
	_, err = s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-1"})
	wantCode(t, err, codes.NotFound, "is not staged")
	// unstage and unpublish of what is not there succeed
	if _, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: filepath.Join(dir, "s")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: filepath.Join(dir, "t")}); err != nil {
		t.Fatal(err)
	}
}

func TestBusyVolumeIsAborted(t *testing.T) {
	s, _ := newUnitServer(t, false)
	unlock, err := s.opts.Locks.TryLock("test", "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	_, err = s.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/s"})
	wantCode(t, err, codes.Aborted, "already in progress")
}
