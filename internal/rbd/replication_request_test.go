package rbd

import (
	"context"
	"strings"
	"testing"

	replpb "github.com/csi-addons/spec/lib/go/replication"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReplicationRequestErrors: every RPC of the replication service answers a request it
// cannot serve before it reaches Ceph (the map's monitor does not exist): a missing volume is
// INVALID_ARGUMENT naming replication_source.volume.volume_id, a volume group UNIMPLEMENTED, a
// volume ID that names no volume (malformed, or of a cluster the map lacks) NOT_FOUND, and a
// bad parameter INVALID_ARGUMENT naming it.
func TestReplicationRequestErrors(t *testing.T) {
	r := unreachableController(t, `[{"clusterID":"local","monitors":["192.0.2.1:6789"]}]`).Replication()
	secrets := unreachableSecrets()
	ctx := context.Background()
	type call func(src *replpb.ReplicationSource, params map[string]string) error
	rpcs := map[string]call{
		"EnableVolumeReplication": func(src *replpb.ReplicationSource, p map[string]string) error {
			_, err := r.EnableVolumeReplication(ctx, &replpb.EnableVolumeReplicationRequest{ReplicationSource: src, Parameters: p, Secrets: secrets})
			return err
		},
		"DisableVolumeReplication": func(src *replpb.ReplicationSource, p map[string]string) error {
			_, err := r.DisableVolumeReplication(ctx, &replpb.DisableVolumeReplicationRequest{ReplicationSource: src, Parameters: p, Secrets: secrets})
			return err
		},
		"PromoteVolume": func(src *replpb.ReplicationSource, p map[string]string) error {
			_, err := r.PromoteVolume(ctx, &replpb.PromoteVolumeRequest{ReplicationSource: src, Parameters: p, Secrets: secrets})
			return err
		},
		"DemoteVolume": func(src *replpb.ReplicationSource, p map[string]string) error {
			_, err := r.DemoteVolume(ctx, &replpb.DemoteVolumeRequest{ReplicationSource: src, Parameters: p, Secrets: secrets})
			return err
		},
		"ResyncVolume": func(src *replpb.ReplicationSource, p map[string]string) error {
			_, err := r.ResyncVolume(ctx, &replpb.ResyncVolumeRequest{ReplicationSource: src, Parameters: p, Secrets: secrets})
			return err
		},
		"GetVolumeReplicationInfo": func(src *replpb.ReplicationSource, _ map[string]string) error {
			_, err := r.GetVolumeReplicationInfo(ctx, &replpb.GetVolumeReplicationInfoRequest{ReplicationSource: src, Secrets: secrets})
			return err
		},
		"GetReplicationDestinationInfo": func(src *replpb.ReplicationSource, _ map[string]string) error {
			_, err := r.GetReplicationDestinationInfo(ctx, &replpb.GetReplicationDestinationInfoRequest{ReplicationSource: src, Secrets: secrets})
			return err
		},
	}
	group := &replpb.ReplicationSource{Type: &replpb.ReplicationSource_Volumegroup{Volumegroup: &replpb.ReplicationSource_VolumeGroupSource{VolumeGroupId: "g"}}}
	const vol = "rv1:local:2::abcdefghijklmnop"
	tests := []struct {
		name   string
		rpcs   []string // none: every RPC
		src    *replpb.ReplicationSource
		params map[string]string
		code   codes.Code
		msg    string
	}{
		{"no replication source", nil, nil, nil, codes.InvalidArgument, "replication_source.volume.volume_id"},
		{"empty volume source", nil, &replpb.ReplicationSource{Type: &replpb.ReplicationSource_Volume{Volume: &replpb.ReplicationSource_VolumeSource{}}}, nil,
			codes.InvalidArgument, "replication_source.volume.volume_id"},
		{"volume group", nil, group, nil, codes.Unimplemented, "volume group"},
		{"malformed volume ID", nil, replSource("not-a-volume"), nil, codes.NotFound, "not-a-volume"},
		{"volume ID of a cluster the map lacks", nil, replSource("rv1:elsewhere:2::abcdefghijklmnop"), nil, codes.NotFound, "elsewhere"},
		{"unknown mirroring mode", []string{"EnableVolumeReplication", "PromoteVolume"}, replSource(vol), map[string]string{"mirroringMode": "pool"},
			codes.InvalidArgument, `parameters["mirroringMode"]`},
		{"interval in seconds", []string{"EnableVolumeReplication", "PromoteVolume"}, replSource(vol), map[string]string{"schedulingInterval": "30s"},
			codes.InvalidArgument, `parameters["schedulingInterval"]`},
		{"start time without interval", []string{"EnableVolumeReplication", "PromoteVolume"}, replSource(vol), map[string]string{"schedulingStartTime": "14:00:00"},
			codes.InvalidArgument, `parameters["schedulingStartTime"]`},
		{"schedule in journal mode", []string{"EnableVolumeReplication", "PromoteVolume"}, replSource(vol), map[string]string{"mirroringMode": "journal", "schedulingInterval": "1h"},
			codes.InvalidArgument, `"schedulingInterval"`},
		{"force that is no boolean", []string{"DisableVolumeReplication"}, replSource(vol), map[string]string{"force": "yes"},
			codes.InvalidArgument, `parameters["force"]`},
	}
	for _, tt := range tests {
		names := tt.rpcs
		if names == nil {
			for n := range rpcs {
				names = append(names, n)
			}
		}
		for _, n := range names {
			t.Run(tt.name+"/"+n, func(t *testing.T) {
				err := rpcs[n](tt.src, tt.params)
				if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
					t.Fatalf("got %v; want %s naming %q", err, tt.code, tt.msg)
				}
			})
		}
	}
}
