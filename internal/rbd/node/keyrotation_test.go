package node

import (
	"context"
	"strings"
	"testing"

	ekrpb "github.com/csi-addons/spec/lib/go/encryptionkeyrotation"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEncryptionKeyRotateRequest: the checks made before any Ceph call, each naming the field.
func TestEncryptionKeyRotateRequest(t *testing.T) {
	secrets := map[string]string{"userID": "u", "userKey": "AQAAAAAAAAAAABAAbW9ub2NlcGgtc2VjcmV0IQ=="}
	vc := volumecontext.Image{ClusterID: "local", Pool: "rbd", Name: "img", Mounter: volumecontext.MounterFuse, Encrypted: true, Librbd: true}.Map()
	with := func(k, v string) map[string]string {
		m := volumecontext.Image{ClusterID: "local", Pool: "rbd", Name: "img", Mounter: volumecontext.MounterFuse}.Map()
		m[k] = v
		return m
	}
	for _, tt := range []struct {
		name string
		req  *ekrpb.EncryptionKeyRotateRequest
		busy bool
		code codes.Code
		text string
	}{
		{"no volume ID", &ekrpb.EncryptionKeyRotateRequest{Secrets: secrets, Parameters: vc}, false, codes.InvalidArgument, "volume_id"},
		{"a key of the caller's", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", EncryptionKey: "k", Secrets: secrets, Parameters: vc}, false, codes.InvalidArgument, "encryption_key"},
		{"no secrets", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", Parameters: vc}, false, codes.InvalidArgument, "secrets"},
		{"bad volume context", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", Secrets: secrets, Parameters: with(volumecontext.Pool, "../x")}, false, codes.InvalidArgument, `parameters (the volume context): volume_context["pool"]`},
		{"no volume context, not staged", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", Secrets: secrets}, false, codes.InvalidArgument, "not staged on this node"},
		{"unknown cluster", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", Secrets: secrets, Parameters: with(volumecontext.ClusterID, "gone")}, false, codes.FailedPrecondition, "gone"},
		{"ceph-csi's encryption", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", Secrets: secrets, Parameters: with(volumecontext.Encrypted, "true")}, false, codes.FailedPrecondition, "ceph-csi"},
		{"operation in flight", &ekrpb.EncryptionKeyRotateRequest{VolumeId: "v", Secrets: secrets, Parameters: vc}, true, codes.Aborted, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, localMap, nil)
			if tt.busy {
				unlock, err := s.opts.Locks.TryLock("NodeStageVolume", tt.req.GetVolumeId())
				if err != nil {
					t.Fatal(err)
				}
				defer unlock()
			}
			_, err := s.KeyRotation().EncryptionKeyRotate(context.Background(), tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("err = %v, want %s saying %q", err, tt.code, tt.text)
			}
		})
	}
}
