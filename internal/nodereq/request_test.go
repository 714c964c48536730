package nodereq

import (
	"context"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/oplock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// wantCode fails unless err is a status with code and a message containing msg; codes.OK
// wants no error.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != code || !strings.Contains(s.Message(), msg) {
		t.Errorf("%s: got %v (%v), want %v containing %q", what, s.Code(), err, code, msg)
	}
}

func TestPaths(t *testing.T) {
	tests := []struct {
		name  string
		check func() (string, error)
		want  string
		code  codes.Code
		msg   string
	}{
		{"path", func() (string, error) { return AbsPath("target_path", "/a/b/../c/") }, "/a/c", codes.OK, ""},
		{"missing path", func() (string, error) { return AbsPath("target_path", "") }, "", codes.InvalidArgument, "target_path is missing"},
		{"relative path", func() (string, error) { return AbsPath("target_path", "a/b") }, "", codes.InvalidArgument, `target_path "a/b" is not an absolute path`},
		{"volume_id first", func() (string, error) { return VolumeAndPath("", "target_path", "") }, "", codes.InvalidArgument, "volume_id is missing"},
		{"volume and path", func() (string, error) { return VolumeAndPath("v", "target_path", "/t/") }, "/t", codes.OK, ""},
		{"volume, relative path", func() (string, error) { return VolumeAndPath("v", "staging_target_path", "s") }, "", codes.InvalidArgument, `staging_target_path "s" is not an absolute path`},
		{"publish staging path", func() (string, error) { return PublishStagingPath("/s/") }, "/s", codes.OK, ""},
		{"publish staging path missing", func() (string, error) { return PublishStagingPath("") }, "", codes.FailedPrecondition, "staging_target_path is missing: NodeStageVolume must succeed first"},
		{"publish staging path relative", func() (string, error) { return PublishStagingPath("s") }, "", codes.InvalidArgument, `staging_target_path "s" is not an absolute path`},
	}
	for _, tt := range tests {
		got, err := tt.check()
		wantCode(t, tt.name, err, tt.code, tt.msg)
		if got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestUnstageUnpublish(t *testing.T) {
	id, p, err := Unstage(&csi.NodeUnstageVolumeRequest{VolumeId: "v", StagingTargetPath: "/s/x/.."})
	if id != "v" || p != "/s" || err != nil {
		t.Fatalf("Unstage = %q, %q, %v", id, p, err)
	}
	_, _, err = Unstage(&csi.NodeUnstageVolumeRequest{StagingTargetPath: "/s"})
	wantCode(t, "unstage: volume_id", err, codes.InvalidArgument, "volume_id is missing")
	_, _, err = Unstage(&csi.NodeUnstageVolumeRequest{VolumeId: "v"})
	wantCode(t, "unstage: staging_target_path", err, codes.InvalidArgument, "staging_target_path is missing")

	id, p, err = Unpublish(&csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/t/"})
	if id != "v" || p != "/t" || err != nil {
		t.Fatalf("Unpublish = %q, %q, %v", id, p, err)
	}
	_, _, err = Unpublish(&csi.NodeUnpublishVolumeRequest{TargetPath: "/t"})
	wantCode(t, "unpublish: volume_id", err, codes.InvalidArgument, "volume_id is missing")
	_, _, err = Unpublish(&csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "t"})
	wantCode(t, "unpublish: relative target_path", err, codes.InvalidArgument, `target_path "t" is not an absolute path`)
}

func TestCapability(t *testing.T) {
	mount := &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	block := &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	mode := func(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability_AccessMode {
		return &csi.VolumeCapability_AccessMode{Mode: m}
	}
	tests := []struct {
		name     string
		c        *csi.VolumeCapability
		readOnly bool
		msg      string
	}{
		{"missing", nil, false, "volume_capability is missing"},
		{"no access mode", &csi.VolumeCapability{AccessType: mount}, false, "volume_capability.access_mode is missing"},
		{"unknown access mode", &csi.VolumeCapability{AccessType: mount, AccessMode: mode(csi.VolumeCapability_AccessMode_UNKNOWN)}, false, "volume_capability.access_mode is missing"},
		// the access mode is named first when both are missing
		{"nothing", &csi.VolumeCapability{}, false, "volume_capability.access_mode is missing"},
		{"no access type", &csi.VolumeCapability{AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER)}, false, "volume_capability.access_type is missing"},
		{"writer", &csi.VolumeCapability{AccessType: mount, AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)}, false, ""},
		{"single reader", &csi.VolumeCapability{AccessType: block, AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY)}, true, ""},
		{"multi reader", &csi.VolumeCapability{AccessType: mount, AccessMode: mode(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)}, true, ""},
		{"single writer", &csi.VolumeCapability{AccessType: block, AccessMode: mode(csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER)}, false, ""},
	}
	for _, tt := range tests {
		readOnly, err := Capability(tt.c)
		if tt.msg == "" {
			wantCode(t, tt.name, err, codes.OK, "")
		} else {
			wantCode(t, tt.name, err, codes.InvalidArgument, tt.msg)
		}
		if readOnly != tt.readOnly {
			t.Errorf("%s: read-only %v, want %v", tt.name, readOnly, tt.readOnly)
		}
	}
}

func TestCredentials(t *testing.T) {
	const key = "AQBr3V5kAAAAABAAbWFkZS11cCB0ZXN0IGtleQ=="
	cred, err := Credentials(map[string]string{"userID": "csi", "userKey": key})
	if err != nil || cred.ID != "csi" || cred.Key() != key {
		t.Fatalf("Credentials = %+v, %v", cred, err)
	}
	_, err = Credentials(nil)
	wantCode(t, "no secrets", err, codes.InvalidArgument, `secrets: secret "userID" is missing`)
	_, err = Credentials(map[string]string{"userID": "csi", "userKey": "not base64! " + key})
	wantCode(t, "bad key", err, codes.InvalidArgument, `secret "userKey" is not a base64`)
	if strings.Contains(err.Error(), key) {
		t.Fatalf("the error shows the key: %v", err)
	}
}

func TestParsePath(t *testing.T) {
	tests := []struct {
		name                           string
		volumeID, field, path, staging string
		required                       bool
		want                           PathRequest
		code                           codes.Code
		msg                            string
	}{
		{name: "stats", volumeID: "v", field: "volume_path", path: "/p/", staging: "/s/", required: true, want: PathRequest{"v", "/p", "/s"}},
		{name: "no staging path", volumeID: "v", field: "volume_path", path: "/p", required: true, want: PathRequest{"v", "/p", ""}},
		{name: "volume_id", field: "volume_path", path: "/p", required: true, code: codes.InvalidArgument, msg: "volume_id is missing"},
		{name: "volume_path", volumeID: "v", field: "volume_path", required: true, code: codes.InvalidArgument, msg: "volume_path is missing"},
		{name: "relative volume_path", volumeID: "v", field: "volume_path", path: "p", required: true, code: codes.NotFound, msg: `volume "v" is not at volume_path "p": not an absolute path`},
		{name: "relative staging path", volumeID: "v", field: "volume_path", path: "/p", staging: "s", required: true, code: codes.InvalidArgument, msg: `staging_target_path "s" is not an absolute path`},
		{name: "optional path", volumeID: "v", field: "volume_publish_path", want: PathRequest{"v", "", ""}},
		{name: "relative optional path", volumeID: "v", field: "volume_publish_path", path: "t", code: codes.NotFound, msg: `is not at volume_publish_path "t"`},
	}
	for _, tt := range tests {
		got, err := ParsePath(tt.volumeID, tt.field, tt.path, tt.staging, tt.required)
		wantCode(t, tt.name, err, tt.code, tt.msg)
		if err == nil && got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestLock(t *testing.T) {
	locks := oplock.New()
	ctx, _, unlock, err := Lock(context.Background(), locks, "NodeStageVolume", "vol-1", "stagingPath", "/s")
	if err != nil || locks.Held() != 1 || ctx == nil {
		t.Fatalf("Lock = %v (%d held)", err, locks.Held())
	}
	_, _, _, err = Lock(context.Background(), locks, "NodePublishVolume", "vol-1")
	wantCode(t, "busy volume", err, codes.Aborted, "")
	unlock()
	if locks.Held() != 0 {
		t.Fatal("the lock is still held")
	}
}
