package rbd

import (
	"context"
	"strings"
	"testing"

	rspb "github.com/csi-addons/spec/lib/go/reclaimspace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestControllerReclaimSpaceRequestErrors: a missing volume_id is INVALID_ARGUMENT naming it;
// an ID that cannot name a volume, or names a cluster the map lacks, is NOT_FOUND. None of them
// reaches Ceph (the map's monitor does not exist).
func TestControllerReclaimSpaceRequestErrors(t *testing.T) {
	r := unreachableController(t, `[{"clusterID":"local","monitors":["192.0.2.1:6789"]}]`).ReclaimSpace()
	secrets := unreachableSecrets()
	tests := []struct {
		name, id string
		code     codes.Code
		msg      string
	}{
		{"no volume_id", "", codes.InvalidArgument, "volume_id"},
		{"malformed", "not-a-volume", codes.NotFound, "not-a-volume"},
		{"unknown cluster", "rv1:elsewhere:2::abcdefghijklmnop", codes.NotFound, "elsewhere"},
		{"unknown ceph-csi cluster", "0001-0009-elsewhere-0000000000000002-b0f8b7a6-7e7b-11ef-9d73-0242ac110003", codes.NotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.ControllerReclaimSpace(context.Background(), &rspb.ControllerReclaimSpaceRequest{VolumeId: tt.id, Secrets: secrets})
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("got %v; want %s naming %q", err, tt.code, tt.msg)
			}
		})
	}
}
