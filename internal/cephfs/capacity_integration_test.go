package cephfs

import (
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestGetCapacityAsTheStorageClassUser: GetCapacity, which carries no secrets, asks as the
// user of the StorageClass's CreateVolume calls; before one has run it says UNAVAILABLE,
// although the process holds connections of the cluster's admin (internal/rbd has the test
// with two users).
func TestGetCapacityAsTheStorageClassUser(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	params := e.params()
	params["csi.storage.k8s.io/provisioner-secret-name"] = "ceph" // as the provisioner sends them
	var vol *csi.Volume
	for _, tt := range []struct {
		name string
		do   func()
		want codes.Code
	}{
		{"before any CreateVolume of the class", func() {}, codes.Unavailable},
		{"after one", func() { vol = e.create(t, e.createReq("capacity", mib, rwx, nil)) }, codes.OK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.do()
			c, err := e.client.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: params})
			if status.Code(err) != tt.want || (err == nil && c.GetAvailableCapacity() <= 0) {
				t.Fatalf("GetCapacity = %v, %v; want %v", c, err, tt.want)
			}
		})
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
