package node

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func mountCap(fsType string, mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fsType}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func blockCap(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

const rwo = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER

var (
	goodSecrets = map[string]string{"userID": "admin", "userKey": "AQBr3V5kAAAAABAAbWFkZS11cCB0ZXN0IGtleQ=="}
	goodContext = map[string]string{volumecontext.ClusterID: "local", volumecontext.Pool: "rbd", volumecontext.ImageName: "img", volumecontext.Mounter: volumecontext.MounterFuse}
)

func stageReq(edit func(*csi.NodeStageVolumeRequest)) *csi.NodeStageVolumeRequest {
	r := &csi.NodeStageVolumeRequest{
		VolumeId: "vol-1", StagingTargetPath: "/staging/vol-1", VolumeCapability: mountCap("ext4", rwo),
		VolumeContext: map[string]string{}, Secrets: map[string]string{},
	}
	for k, v := range goodContext {
		r.VolumeContext[k] = v
	}
	for k, v := range goodSecrets {
		r.Secrets[k] = v
	}
	edit(r)
	return r
}

func publishReq(edit func(*csi.NodePublishVolumeRequest)) *csi.NodePublishVolumeRequest {
	r := &csi.NodePublishVolumeRequest{
		VolumeId: "vol-1", StagingTargetPath: "/staging/vol-1", TargetPath: "/pods/p/vol", VolumeCapability: mountCap("", rwo),
	}
	edit(r)
	return r
}

// TestRequestChecks covers every request the spec makes INVALID_ARGUMENT (a required field
// missing or malformed) or FAILED_PRECONDITION (capabilities this node does not support),
// before any Ceph or mount work: none of these needs a cluster.
func TestRequestChecks(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		// NodeStageVolume
		{"stage: volume_id", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "" }))
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"stage: staging_target_path", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "" }))
			return err
		}, codes.InvalidArgument, "staging_target_path is missing"},
		{"stage: relative staging_target_path", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "staging" }))
			return err
		}, codes.InvalidArgument, "staging_target_path \"staging\" is not an absolute path"},
		{"stage: volume_capability", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = nil }))
			return err
		}, codes.InvalidArgument, "volume_capability is missing"},
		{"stage: access_mode", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability.AccessMode = nil }))
			return err
		}, codes.InvalidArgument, "volume_capability.access_mode is missing"},
		{"stage: access_type", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability.AccessType = nil }))
			return err
		}, codes.InvalidArgument, "volume_capability.access_type is missing"},
		{"stage: clusterID", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { delete(r.VolumeContext, volumecontext.ClusterID) }))
			return err
		}, codes.InvalidArgument, `volume_context["clusterID"] is missing`},
		{"stage: imageName", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[volumecontext.ImageName] = "" }))
			return err
		}, codes.InvalidArgument, `volume_context["imageName"] is missing`},
		{"stage: bad mounter", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[volumecontext.Mounter] = "nfs" }))
			return err
		}, codes.InvalidArgument, `volume_context["mounter"] = "nfs"`},
		{"stage: userID", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { delete(r.Secrets, "userID") }))
			return err
		}, codes.InvalidArgument, `secret "userID" is missing`},
		{"stage: userKey", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userKey"] = "" }))
			return err
		}, codes.InvalidArgument, `secret "userKey" is missing`},
		{"stage: userKey not base64", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userKey"] = "not base64!" }))
			return err
		}, codes.InvalidArgument, `secret "userKey" is not a base64 cephx key`},
		// injection attempts: options for rbd-fuse or rbd, a second mount option, a path
		{"stage: userID with a second mount option", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userID"] = "admin,secretfile=/etc/shadow" }))
			return err
		}, codes.InvalidArgument, `secret "userID" is not a Ceph user name`},
		{"stage: userID as an option", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userID"] = "-oX" }))
			return err
		}, codes.InvalidArgument, `secret "userID" is not a Ceph user name`},
		{"stage: pool as an option", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[volumecontext.Pool] = "-oX" }))
			return err
		}, codes.InvalidArgument, `volume_context["pool"] = "-oX"`},
		{"stage: namespace as an option", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) {
				r.VolumeContext[volumecontext.RadosNamespace] = "--keyfile=/etc/shadow"
			}))
			return err
		}, codes.InvalidArgument, `volume_context["radosNamespace"] = "--keyfile=/etc/shadow"`},
		{"stage: image outside the rbd-fuse mount", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[volumecontext.ImageName] = "../../../dev/sda" }))
			return err
		}, codes.InvalidArgument, `volume_context["imageName"] = "../../../dev/sda"`},
		{"stage: image with a mount option", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[volumecontext.ImageName] = "img,allow_other" }))
			return err
		}, codes.InvalidArgument, `volume_context["imageName"] = "img,allow_other"`},
		{"stage: fs_type", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = mountCap("ntfs", rwo) }))
			return err
		}, codes.FailedPrecondition, `fs_type "ntfs" is not supported`},
		{"stage: filesystem shared by writers", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) {
				r.VolumeCapability = mountCap("xfs", csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
			}))
			return err
		}, codes.FailedPrecondition, "needs access_type block"},
		{"stage: cluster not in the map", func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext[volumecontext.ClusterID] = "other" }))
			return err
		}, codes.FailedPrecondition, `clusterID "other" is not in the cluster map`},

		// NodeUnstageVolume
		{"unstage: volume_id", func() error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: "/staging/vol-1"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"unstage: staging_target_path", func() error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "staging_target_path is missing"},

		// NodePublishVolume
		{"publish: volume_id", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }))
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"publish: staging_target_path (spec: FAILED_PRECONDITION)", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "" }))
			return err
		}, codes.FailedPrecondition, "staging_target_path is missing"},
		{"publish: target_path", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }))
			return err
		}, codes.InvalidArgument, "target_path is missing"},
		{"publish: relative target_path", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "a/b" }))
			return err
		}, codes.InvalidArgument, "target_path \"a/b\" is not an absolute path"},
		{"publish: volume_capability", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }))
			return err
		}, codes.InvalidArgument, "volume_capability is missing"},
		{"publish: access_mode", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability.AccessMode = nil }))
			return err
		}, codes.InvalidArgument, "volume_capability.access_mode is missing"},
		{"publish: not staged", func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = t.TempDir() }))
			return err
		}, codes.FailedPrecondition, "is not staged at"},

		// NodeUnpublishVolume
		{"unpublish: volume_id", func() error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: "/pods/p/vol"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"unpublish: target_path", func() error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "target_path is missing"},

		// NodeExpandVolume
		{"expand: volume_id", func() error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumePath: "/pods/p/vol"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"expand: volume_path", func() error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "volume_path is missing"},
		{"expand: relative staging_target_path", func() error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: "/p", StagingTargetPath: "s"})
			return err
		}, codes.InvalidArgument, "staging_target_path \"s\" is not an absolute path"},
		{"expand: limit below required", func() error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: "/p",
				CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20}})
			return err
		}, codes.OutOfRange, "capacity_range"},
		{"expand: not staged", func() error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "vol-unknown", VolumePath: t.TempDir()})
			return err
		}, codes.NotFound, "is not staged on this node"},

		// NodeGetVolumeStats
		{"stats: volume_id", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: "/pods/p/vol"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"stats: volume_path", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "volume_path is missing"},
		{"stats: path does not exist", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: "/no/such/path"})
			return err
		}, codes.NotFound, "does not exist"},
		{"stats: path is not a mount", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: t.TempDir()})
			return err
		}, codes.NotFound, "is not a mount"},
		{"stats: a mount of another volume", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-unknown", VolumePath: "/proc"})
			return err
		}, codes.NotFound, "is not staged on this node"},

		// NodeGetVolumeHealth
		{"health: volume_id", func() error {
			_, err := s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"health: relative publish path", func() error {
			_, err := s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "v", VolumePublishPath: "p"})
			return err
		}, codes.InvalidArgument, "volume_publish_path \"p\" is not an absolute path"},
		{"health: not staged", func() error {
			_, err := s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-unknown"})
			return err
		}, codes.NotFound, "is not staged on this node"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			st, _ := status.FromError(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Fatalf("got %v %q, want %v containing %q", st.Code(), st.Message(), tt.code, tt.msg)
			}
			if s.opts.Locks.Held() != 0 {
				t.Fatal("a volume lock is still held")
			}
		})
	}
}

// TestMountersThisNodeLacks: krbd and rbd-nbd need kernel modules this kind of machine does
// not have; staging such a volume fails with FAILED_PRECONDITION naming the mounter and what
// is missing, while the server itself started.
func TestMountersThisNodeLacks(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	for _, mounter := range []string{volumecontext.MounterKRBD, volumecontext.MounterNBD} {
		t.Run(mounter, func(t *testing.T) {
			if s.attachers[mounter].Available() == nil {
				t.Skipf("this node has %s", mounter)
			}
			_, err := s.NodeStageVolume(context.Background(), stageReq(func(r *csi.NodeStageVolumeRequest) {
				r.VolumeContext[volumecontext.Mounter] = mounter
				r.StagingTargetPath = t.TempDir()
			}))
			st, _ := status.FromError(err)
			if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), `mounter "`+mounter+`"`) ||
				!strings.Contains(st.Message(), "is missing") && !strings.Contains(st.Message(), "not installed") {
				t.Fatalf("got %v %q, want FAILED_PRECONDITION naming %s and what is missing", st.Code(), st.Message(), mounter)
			}
			t.Log(st.Message())
		})
	}
}

func TestBusyVolumeIsAborted(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	unlock, err := s.opts.Locks.TryLock("test", "vol-1")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx := context.Background()
	calls := map[string]func() error{
		"stage": func() error {
			_, err := s.NodeStageVolume(ctx, stageReq(func(*csi.NodeStageVolumeRequest) {}))
			return err
		},
		"unstage": func() error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/s"})
			return err
		},
		"publish": func() error {
			_, err := s.NodePublishVolume(ctx, publishReq(func(*csi.NodePublishVolumeRequest) {}))
			return err
		},
		"unpublish": func() error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1", TargetPath: "/t"})
			return err
		},
		"expand": func() error {
			_, err := s.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: "vol-1", VolumePath: "/t"})
			return err
		},
	}
	for name, call := range calls {
		if err := call(); status.Code(err) != codes.Aborted {
			t.Errorf("%s on a busy volume: %v, want ABORTED", name, err)
		}
	}
}

func TestInfoAndCapabilities(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	info, err := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.GetNodeId() != "node-1" || info.GetMaxVolumesPerNode() != 0 || info.GetAccessibleTopology() != nil {
		t.Fatalf("NodeGetInfo = %v, %v", info, err)
	}
	// with --domain-labels, the node's topology
	s.opts.Topology = map[string]string{"topology.rbd.monoceph.io/zone": "z1"}
	info, err = s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil || info.GetAccessibleTopology().GetSegments()["topology.rbd.monoceph.io/zone"] != "z1" {
		t.Fatalf("NodeGetInfo with a topology = %v, %v", info, err)
	}
	caps, err := s.NodeGetCapabilities(context.Background(), &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[csi.NodeServiceCapability_RPC_Type]bool{}
	for _, c := range caps.GetCapabilities() {
		got[c.GetRpc().GetType()] = true
	}
	for _, want := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME, csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	} {
		if !got[want] {
			t.Errorf("capability %v missing", want)
		}
	}
	if len(got) != 4 {
		t.Errorf("capabilities = %v", got)
	}
}
