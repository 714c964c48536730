package controller

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/volcap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Source is a decoded volume_content_source: a snapshot, a volume, or neither.
type Source[S, V fmt.Stringer] struct {
	Snap *S
	Vol  *V
}

// String names the source for journal records and messages ("" for none).
func (s Source[S, V]) String() string {
	switch {
	case s.Snap != nil:
		return "snapshot:" + (*s.Snap).String()
	case s.Vol != nil:
		return "volume:" + (*s.Vol).String()
	}
	return ""
}

// ParseSource decodes a content source with the backend's ID parsers. An ID that does not
// decode names nothing that exists: NOT_FOUND, as for any unknown source.
func ParseSource[S, V fmt.Stringer](cs *csi.VolumeContentSource, snap func(string) (S, error), vol func(string) (V, error)) (Source[S, V], error) {
	switch {
	case cs == nil:
		return Source[S, V]{}, nil
	case cs.GetSnapshot() != nil:
		id := cs.GetSnapshot().GetSnapshotId()
		if id == "" {
			return Source[S, V]{}, status.Error(codes.InvalidArgument, "volume_content_source.snapshot.snapshot_id is missing")
		}
		s, err := snap(id)
		if err != nil {
			return Source[S, V]{}, NotFoundf("source snapshot %q does not exist", id)
		}
		return Source[S, V]{Snap: &s}, nil
	case cs.GetVolume() != nil:
		id := cs.GetVolume().GetVolumeId()
		if id == "" {
			return Source[S, V]{}, status.Error(codes.InvalidArgument, "volume_content_source.volume.volume_id is missing")
		}
		v, err := vol(id)
		if err != nil {
			return Source[S, V]{}, NotFoundf("source volume %q does not exist", id)
		}
		return Source[S, V]{Vol: &v}, nil
	}
	return Source[S, V]{}, status.Error(codes.InvalidArgument, "volume_content_source: neither snapshot nor volume")
}

// VolumeSnapshotClass keys both backends take: ceph-csi's, so existing classes keep working.
const (
	ParamClusterID          = "clusterID"
	ParamSnapshotNamePrefix = "snapshotNamePrefix"
	// DefaultSnapshotNamePrefix is ceph-csi's default prefix, the one monoceph names with.
	DefaultSnapshotNamePrefix = "csi-snap-"
)

// CheckCreateSnapshot checks the fields every backend needs and the VolumeSnapshotClass
// parameters: clusterID and snapshotNamePrefix (ceph-csi's keys), the backend's known ones and
// the sidecars' own. A snapshotNamePrefix other than the name monoceph gives is refused: a
// class asking for other names must not silently get these.
func CheckCreateSnapshot(req *csi.CreateSnapshotRequest, known ...string) error {
	switch {
	case req.GetName() == "":
		return status.Error(codes.InvalidArgument, "name is missing")
	case req.GetSourceVolumeId() == "":
		return status.Error(codes.InvalidArgument, "source_volume_id is missing")
	}
	p := req.GetParameters()
	if err := classparam.UnknownParams(p, append([]string{ParamClusterID, ParamSnapshotNamePrefix}, known...)...); err != nil {
		return err
	}
	if v, ok := p[ParamSnapshotNamePrefix]; ok && v != DefaultSnapshotNamePrefix {
		return classparam.InvalidParam(ParamSnapshotNamePrefix, "%q: custom snapshot name prefixes are not supported (snapshots are named %s<ID>); remove the key or set it to %q",
			v, DefaultSnapshotNamePrefix, DefaultSnapshotNamePrefix)
	}
	return nil
}

// CheckSnapshotCluster refuses a clusterID parameter naming another cluster than the source
// volume's: a snapshot lives on its volume's cluster, and a class meant for another one is a
// mistake worth stopping.
func CheckSnapshotCluster(p map[string]string, srcID, srcCluster string) error {
	if v, ok := p[ParamClusterID]; ok && v != srcCluster {
		return classparam.InvalidParam(ParamClusterID, "%q is not the cluster of source volume %s (%q)", v, srcID, srcCluster)
	}
	return nil
}

// CheckExpand checks a ControllerExpandVolumeRequest against what the backend supports and
// returns the new size in whole MiB.
func CheckExpand(req *csi.ControllerExpandVolumeRequest, support volcap.Support) (int64, error) {
	if req.GetVolumeId() == "" {
		return 0, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	if req.GetCapacityRange() == nil {
		return 0, status.Error(codes.InvalidArgument, "capacity_range is missing")
	}
	if vc := req.GetVolumeCapability(); vc != nil {
		if reason := support.Check([]*csi.VolumeCapability{vc}); reason != "" {
			return 0, status.Error(codes.InvalidArgument, "volume_capability: "+reason)
		}
	}
	return volcap.Size(req.GetCapacityRange(), 0)
}

// CheckValidate checks the fields ValidateVolumeCapabilities requires.
func CheckValidate(req *csi.ValidateVolumeCapabilitiesRequest) error {
	switch {
	case req.GetVolumeId() == "":
		return status.Error(codes.InvalidArgument, "volume_id is missing")
	case len(req.GetVolumeCapabilities()) == 0:
		return status.Error(codes.InvalidArgument, "volume_capabilities is missing")
	}
	return nil
}
