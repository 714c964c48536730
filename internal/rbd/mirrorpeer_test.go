package rbd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMirrorPeerResolution: on site B, whose map lists site A as a mirror peer, only the IDs of
// existing monoceph RBD volumes and snapshots resolve through the peer; a class naming the
// peer's clusterID is refused naming the field, and a ceph-csi handle of the peer is
// FAILED_PRECONDITION (its pool ID would be the peer's, unmapped). None reaches Ceph (the
// map's monitor does not exist).
func TestMirrorPeerResolution(t *testing.T) {
	c := unreachableController(t, `[{"clusterID":"b","monitors":["192.0.2.1:6789"],"rbd":{"mirrorPeers":[{"clusterID":"a","poolIDs":{"2":5}}]}}]`)
	if cl, err := c.idCluster("a", codes.NotFound, "volume_id"); err != nil || cl.ClusterID != "b" || cl.MirrorOf != "a" {
		t.Errorf("idCluster(a) = %q (mirror of %q), %v; want b through the peer a", cl.ClusterID, cl.MirrorOf, err)
	}
	secrets := unreachableSecrets()
	caps := []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
	tests := []struct {
		name string
		call func() error
		code codes.Code
		msg  string
	}{
		{"create with the peer's clusterID", func() error {
			_, err := c.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: caps,
				Parameters: map[string]string{"clusterID": "a", "pool": "rbd"}, Secrets: secrets})
			return err
		}, codes.InvalidArgument, `parameters["clusterID"]`},
		{"delete a ceph-csi handle of the peer", func() error {
			_, err := c.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: "0001-0001-a-0000000000000002-b0f8b7a6-7e7b-11ef-9d73-0242ac110003", Secrets: secrets})
			return err
		}, codes.FailedPrecondition, "mirror peer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("got %v; want %s naming %q", err, tt.code, tt.msg)
			}
		})
	}
}

// TestMappedPoolErr: a pool ID the peer mapping names but the cluster lacks is a wrong map
// (FAILED_PRECONDITION, not gone: DeleteVolume must not answer OK and leak the image); the
// same for an ID of this cluster means its volume is gone.
func TestMappedPoolErr(t *testing.T) {
	missing := fmt.Errorf("look up pool: %w", ceph.ErrNotFound)
	tests := []struct {
		name     string
		mirrorOf string
		err      error
		gone     bool
		code     codes.Code
	}{
		{"own pool missing", "", missing, true, codes.Unknown},
		{"mapped pool missing", "a", missing, false, codes.FailedPrecondition},
		{"other error", "a", errors.New("timeout"), false, codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gone, err := mappedPoolErr(v1.Cluster{ClusterID: "b", MirrorOf: tt.mirrorOf}, 5, tt.err)
			if gone != tt.gone || status.Code(err) != tt.code {
				t.Errorf("gone %v, %v; want %v, %v", gone, err, tt.gone, tt.code)
			}
		})
	}
}

// TestRecordSnapshotID: a snapshot listed on site B of site A's volume carries the ID
// CreateSnapshot minted for it (A's cluster ID and pool ID, as its source volume ID keeps
// them), never B's cluster ID with A's pool ID.
func TestRecordSnapshotID(t *testing.T) {
	tests := []struct{ src, want string }{
		{"rv1:site-a:2::abcdefghijklmnop", "site-a:2:"},
		{"rv1:site-b:5:ns:abcdefghijklmnop", "site-b:5:ns:"},
	}
	for _, tt := range tests {
		src, err := volid.ParseRBDVolume(tt.src)
		if err != nil {
			t.Fatal(err)
		}
		id := recordSnapshotID(src, "qrstuvwxyzabcdef").String()
		if !strings.Contains(id, tt.want) {
			t.Errorf("snapshot of %s: %s, want it to carry %q", tt.src, id, tt.want)
		}
		if _, err := parseSnapshotID(id); err != nil {
			t.Errorf("%s does not parse as a snapshot ID: %v", id, err)
		}
	}
}
