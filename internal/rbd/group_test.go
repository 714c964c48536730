package rbd

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGroupRefusesCephCSIVolumes: a volume ceph-csi created cannot join a group snapshot, and
// the answer says so instead of calling an existing volume missing.
func TestGroupRefusesCephCSIVolumes(t *testing.T) {
	const csiVol = "0001-0009-rook-ceph-0000000000000002-b0f8b7a6-7e7b-11ef-9d73-0242ac110003"
	for _, ids := range [][]string{{csiVol}, {"rv1:local:2::abcdefghijklmnop", csiVol}} {
		_, err := validateGroupCreate(&csi.CreateVolumeGroupSnapshotRequest{Name: "g", SourceVolumeIds: ids})
		if status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("%v: %v, want FAILED_PRECONDITION", ids, err)
		}
	}
}
