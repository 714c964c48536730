package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// GroupCapabilities is what both group controllers advertise.
func GroupCapabilities() *csi.GroupControllerGetCapabilitiesResponse {
	return &csi.GroupControllerGetCapabilitiesResponse{Capabilities: []*csi.GroupControllerServiceCapability{{
		Type: &csi.GroupControllerServiceCapability_Rpc{Rpc: &csi.GroupControllerServiceCapability_RPC{
			Type: csi.GroupControllerServiceCapability_RPC_CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT,
		}},
	}}}
}

// CheckCreateGroupSnapshot checks the fields of a CreateVolumeGroupSnapshot every backend needs
// and returns the source volume IDs sorted: a group snapshot is idempotent over the set of its
// volumes, which a CO may list in any order.
func CheckCreateGroupSnapshot(req *csi.CreateVolumeGroupSnapshotRequest) ([]string, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is missing")
	}
	ids := slices.Clone(req.GetSourceVolumeIds())
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "source_volume_ids is missing")
	}
	slices.Sort(ids)
	for i, id := range ids {
		switch {
		case id == "":
			return nil, status.Error(codes.InvalidArgument, "source_volume_ids has an empty entry")
		case i > 0 && ids[i-1] == id:
			return nil, status.Errorf(codes.InvalidArgument, "source_volume_ids names %q twice", id)
		}
	}
	return ids, nil
}

// CheckGroupSnapshotID is the check Delete- and GetVolumeGroupSnapshot share.
func CheckGroupSnapshotID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "group_snapshot_id is missing")
	}
	return nil
}

// CheckMembers compares the snapshot_ids of a Delete- or GetVolumeGroupSnapshot with the
// members the group snapshot has. The spec asks plugins that can detect a mismatch to report
// it (INVALID_ARGUMENT); an empty list is accepted, as the driver does not need it.
func CheckMembers(given, members []string) error {
	if len(given) == 0 {
		return nil
	}
	g, m := slices.Clone(given), slices.Clone(members)
	slices.Sort(g)
	slices.Sort(m)
	if !slices.Equal(g, m) {
		return status.Errorf(codes.InvalidArgument, "snapshot_ids [%s] are not the members of the group snapshot [%s]",
			strings.Join(given, ", "), strings.Join(members, ", "))
	}
	return nil
}

// NotTogether is the answer for volumes that cannot be snapshotted as one group, naming why.
func NotTogether(format string, a ...any) error {
	return status.Errorf(codes.FailedPrecondition, "cannot snapshot these volumes together: %s", fmt.Sprintf(format, a...))
}

// GroupSnapshot builds the VolumeGroupSnapshot message; every member carries the group's ID,
// so the CO never deletes one on its own.
func GroupSnapshot(id string, created time.Time, members []*csi.Snapshot) *csi.VolumeGroupSnapshot {
	ready := len(members) > 0
	for _, m := range members {
		m.GroupSnapshotId = id
		ready = ready && m.GetReadyToUse()
	}
	return &csi.VolumeGroupSnapshot{GroupSnapshotId: id, Snapshots: members, CreationTime: timestamppb.New(created), ReadyToUse: ready}
}
