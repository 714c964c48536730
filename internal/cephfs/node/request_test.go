package node

import (
	"context"
	"maps"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestInvalidArguments checks every INVALID_ARGUMENT (and the spec's FAILED_PRECONDITION for a
// missing staging path in publish) before anything is mounted: each names the field.
func TestInvalidArguments(t *testing.T) {
	s, x := newUnitServer(t, false)
	ctx := context.Background()
	rw := mountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	withCtx := func(k, v string) map[string]string {
		m := maps.Clone(testContext())
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	stage := func(mod func(*csi.NodeStageVolumeRequest)) func() error {
		return func() error {
			req := &csi.NodeStageVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging", VolumeCapability: rw,
				Secrets: testSecrets(), VolumeContext: testContext()}
			mod(req)
			_, err := s.NodeStageVolume(ctx, req)
			return err
		}
	}
	publish := func(mod func(*csi.NodePublishVolumeRequest)) func() error {
		return func() error {
			req := &csi.NodePublishVolumeRequest{VolumeId: "vol-1", StagingTargetPath: "/staging", TargetPath: "/target",
				VolumeCapability: rw}
			mod(req)
			_, err := s.NodePublishVolume(ctx, req)
			return err
		}
	}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"stage: volume_id", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeId = "" }), codes.InvalidArgument, "volume_id is missing"},
		{"stage: staging_target_path", stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "" }), codes.InvalidArgument, "staging_target_path is missing"},
		{"stage: relative staging_target_path", stage(func(r *csi.NodeStageVolumeRequest) { r.StagingTargetPath = "staging" }), codes.InvalidArgument, "staging_target_path \"staging\" is not an absolute path"},
		{"stage: volume_capability", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeCapability = nil }), codes.InvalidArgument, "volume_capability is missing"},
		{"stage: access_mode", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = &csi.VolumeCapability{AccessType: rw.AccessType}
		}), codes.InvalidArgument, "volume_capability.access_mode is missing"},
		{"stage: access_type", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = &csi.VolumeCapability{AccessMode: rw.AccessMode}
		}), codes.InvalidArgument, "volume_capability.access_type is missing"},
		{"stage: block", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeCapability = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}, AccessMode: rw.AccessMode}
		}), codes.FailedPrecondition, "no block access"},
		{"stage: secrets", stage(func(r *csi.NodeStageVolumeRequest) { r.Secrets = nil }), codes.InvalidArgument, `secret "adminID" is missing or empty (and so is "userID")`},
		{"stage: userKey", stage(func(r *csi.NodeStageVolumeRequest) { delete(r.Secrets, "userKey") }), codes.InvalidArgument, `secret "userKey" is missing`},
		{"stage: bad userKey", stage(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userKey"] = "not base64!" }), codes.InvalidArgument, `secret "userKey" is not a base64`},
		{"stage: clusterID", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("clusterID", "") }), codes.InvalidArgument, `volume_context["clusterID"] is missing`},
		{"stage: fsName", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("fsName", "") }), codes.InvalidArgument, `volume_context["fsName"] is missing`},
		{"stage: rootPath", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("rootPath", "") }), codes.InvalidArgument, `volume_context["rootPath"] is missing`},
		{"stage: relative rootPath", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("rootPath", "volumes/x") }), codes.InvalidArgument, `volume_context["rootPath"]`},
		{"stage: .snap rootPath", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("rootPath", "/volumes/x/.snap/s") }), codes.InvalidArgument, `volume_context["rootPath"]`},
		// injection attempts: options for ceph-fuse or mount, a second mount option, a path
		{"stage: userID with a second mount option", stage(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userID"] = "admin,secretfile=/etc/shadow" }),
			codes.InvalidArgument, `secret "userID" is not a Ceph user name`},
		{"stage: userID as an option", stage(func(r *csi.NodeStageVolumeRequest) { r.Secrets["userID"] = "-oX" }), codes.InvalidArgument, `secret "userID" is not a Ceph user name`},
		{"stage: fsName as an option", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("fsName", "-oX") }), codes.InvalidArgument, `volume_context["fsName"] = "-oX"`},
		{"stage: fsName with a mount option", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeContext = withCtx("fsName", "myfs,secretfile=/etc/shadow")
		}),
			codes.InvalidArgument, `volume_context["fsName"] = "myfs,secretfile=/etc/shadow"`},
		{"stage: rootPath escaping", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("rootPath", "/../../../dev/sda") }),
			codes.InvalidArgument, `volume_context["rootPath"] = "/../../../dev/sda"`},
		{"stage: rootPath with a mount option", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("rootPath", "/volumes/x,ro") }),
			codes.InvalidArgument, `volume_context["rootPath"] = "/volumes/x,ro"`},
		{"stage: snapshot outside .snap", stage(func(r *csi.NodeStageVolumeRequest) {
			r.VolumeContext = withCtx("shallow", "true")
			r.VolumeContext["snapshotName"] = "../../../dev/sda"
		}), codes.InvalidArgument, `volume_context["snapshotName"] = "../../../dev/sda"`},
		{"stage: mounter", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("mounter", "nfs") }), codes.InvalidArgument, `volume_context["mounter"]`},
		{"stage: shallow", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("shallow", "yes") }), codes.InvalidArgument, `volume_context["shallow"]`},
		{"stage: shallow without snapshot", stage(func(r *csi.NodeStageVolumeRequest) { r.VolumeContext = withCtx("shallow", "true") }), codes.InvalidArgument, `volume_context["snapshotName"]`},
		{"stage: fuse option overriding -r", stage(func(r *csi.NodeStageVolumeRequest) {
			r.StagingTargetPath = t.TempDir()
			r.VolumeContext = withCtx("fuseMountOptions", "--client_mountpoint=/")
			r.VolumeContext["mounter"] = "fuse"
		}), codes.InvalidArgument, "fuse mount options"},
		{"stage: fuse option naming the monitors", stage(func(r *csi.NodeStageVolumeRequest) {
			r.StagingTargetPath = t.TempDir()
			r.VolumeContext = withCtx("fuseMountOptions", "--mon_host=10.9.9.9")
			r.VolumeContext["mounter"] = "fuse"
		}), codes.InvalidArgument, "fuse mount options"},
		{"stage: mount flag naming the key file", stage(func(r *csi.NodeStageVolumeRequest) {
			r.StagingTargetPath = t.TempDir()
			r.VolumeContext = withCtx("mounter", "fuse")
			r.VolumeCapability = mountCapability(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
			r.VolumeCapability.GetMount().MountFlags = []string{"--keyfile=/etc/shadow"}
		}), codes.InvalidArgument, "fuse mount options"},

		{"unstage: volume_id", func() error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{StagingTargetPath: "/staging"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"unstage: staging_target_path", func() error {
			_, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "staging_target_path is missing"},

		{"publish: volume_id", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeId = "" }), codes.InvalidArgument, "volume_id is missing"},
		{"publish: staging_target_path", publish(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "" }), codes.FailedPrecondition, "staging_target_path is missing"},
		{"publish: relative staging_target_path", publish(func(r *csi.NodePublishVolumeRequest) { r.StagingTargetPath = "s" }), codes.InvalidArgument, "staging_target_path \"s\" is not an absolute path"},
		{"publish: target_path", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "" }), codes.InvalidArgument, "target_path is missing"},
		{"publish: relative target_path", publish(func(r *csi.NodePublishVolumeRequest) { r.TargetPath = "t" }), codes.InvalidArgument, "target_path \"t\" is not an absolute path"},
		{"publish: volume_capability", publish(func(r *csi.NodePublishVolumeRequest) { r.VolumeCapability = nil }), codes.InvalidArgument, "volume_capability is missing"},
		{"publish: access_mode", publish(func(r *csi.NodePublishVolumeRequest) {
			r.VolumeCapability = &csi.VolumeCapability{AccessType: rw.AccessType}
		}), codes.InvalidArgument, "volume_capability.access_mode is missing"},
		{"publish: bad secrets", publish(func(r *csi.NodePublishVolumeRequest) { r.Secrets = map[string]string{"userID": "x"} }), codes.InvalidArgument, `secret "userKey" is missing`},

		{"unpublish: volume_id", func() error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{TargetPath: "/target"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"unpublish: target_path", func() error {
			_, err := s.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "target_path is missing"},

		{"stats: volume_id", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumePath: "/target"})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"stats: volume_path", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1"})
			return err
		}, codes.InvalidArgument, "volume_path is missing"},
		{"stats: relative staging_target_path", func() error {
			_, err := s.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: "vol-1", VolumePath: "/t", StagingTargetPath: "s"})
			return err
		}, codes.InvalidArgument, "staging_target_path \"s\" is not an absolute path"},
		{"health: volume_id", func() error {
			_, err := s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{})
			return err
		}, codes.InvalidArgument, "volume_id is missing"},
		{"health: relative volume_publish_path", func() error {
			_, err := s.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: "vol-1", VolumePublishPath: "t"})
			return err
		}, codes.NotFound, "is not at volume_publish_path \"t\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.call(), tt.code, tt.msg)
		})
	}
	for _, c := range x.calls {
		if c != "modprobe ceph" {
			t.Errorf("a rejected request ran %q", c)
		}
	}
	if n := s.opts.Locks.Held(); n != 0 {
		t.Errorf("%d locks held after the calls", n)
	}
}
