package node

import (
	"context"
	"strings"
	"testing"

	rspb "github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNodeReclaimSpaceRequestErrors: the csi-addons codes for malformed requests name the
// field, and a volume this node has not staged is NOT_FOUND. No command runs for any of them.
func TestNodeReclaimSpaceRequestErrors(t *testing.T) {
	x := &scriptedExec{}
	r := newTestServer(t, localMap, x).ReclaimSpace()
	dir := t.TempDir()
	tests := []struct {
		name string
		req  *rspb.NodeReclaimSpaceRequest
		code codes.Code
		msg  string
	}{
		{"no volume_id", &rspb.NodeReclaimSpaceRequest{VolumePath: dir}, codes.InvalidArgument, "volume_id"},
		{"no path", &rspb.NodeReclaimSpaceRequest{VolumeId: "v"}, codes.InvalidArgument, "volume_path"},
		{"relative staging path", &rspb.NodeReclaimSpaceRequest{VolumeId: "v", StagingTargetPath: "staging"}, codes.InvalidArgument, "staging_target_path"},
		{"relative volume path", &rspb.NodeReclaimSpaceRequest{VolumeId: "v", VolumePath: "target"}, codes.NotFound, "volume_path"},
		{"not staged, by volume path", &rspb.NodeReclaimSpaceRequest{VolumeId: "v", VolumePath: dir + "/target"}, codes.NotFound, "not staged"},
		{"not staged, by staging path", &rspb.NodeReclaimSpaceRequest{VolumeId: "v", StagingTargetPath: dir + "/staging"}, codes.NotFound, "not staged"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.NodeReclaimSpace(context.Background(), tt.req)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("got %v; want %s naming %q", err, tt.code, tt.msg)
			}
		})
	}
	if len(x.ran) > 0 {
		t.Errorf("commands ran: %v", x.ran)
	}
}
