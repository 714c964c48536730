package snapmeta

import (
	"context"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// KubeServer is the Kubernetes-facing SnapshotMetadata API of external-snapshot-metadata
// (package snapshotmetadata), served in-process: what the upstream sidecar does, without the
// sidecar and its second gRPC hop. Backup applications reach it through the address the
// SnapshotMetadataService object publishes, with a service account token for its audience.
type KubeServer struct {
	api.UnimplementedSnapshotMetadataServer
	engine *Engine
	kube   Kube
}

// kubeTimeout bounds the API server lookups before a stream starts (token and access
// reviews, VolumeSnapshot, content, class and Secret reads).
const kubeTimeout = 30 * time.Second

// NewKubeServer serves e to callers that kube authenticates and authorizes.
func NewKubeServer(e *Engine, kube Kube) *KubeServer { return &KubeServer{engine: e, kube: kube} }

// admit authenticates the token, checks the request names a namespace, and authorizes the
// caller to get VolumeSnapshots there. Authentication comes first, so an anonymous caller
// learns nothing about the request's validity.
func (s *KubeServer) admit(ctx context.Context, token, namespace string) error {
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	user, err := s.kube.Authenticate(ctx, token)
	if err != nil {
		return err
	}
	if namespace == "" {
		return status.Error(codes.InvalidArgument, "namespace is missing")
	}
	return s.kube.Authorize(ctx, user, namespace)
}

// target resolves the VolumeSnapshot of a request to its CSI snapshot and credentials.
func (s *KubeServer) target(ctx context.Context, namespace, name, field string) (Query, error) {
	if name == "" {
		return Query{}, status.Errorf(codes.InvalidArgument, "%s is missing", field)
	}
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	handle, secrets, err := s.kube.Snapshot(ctx, namespace, name)
	if err != nil {
		return Query{}, err
	}
	id, err := ParseSnapshotID("snapshot handle of VolumeSnapshot "+namespace+"/"+name, handle)
	if err != nil {
		return Query{}, status.Errorf(codes.FailedPrecondition, "%v", status.Convert(err).Message())
	}
	return Query{Target: id, Secrets: secrets}, nil
}

// GetMetadataAllocated streams the allocated extents of a VolumeSnapshot.
func (s *KubeServer) GetMetadataAllocated(req *api.GetMetadataAllocatedRequest, stream api.SnapshotMetadata_GetMetadataAllocatedServer) error {
	ctx := stream.Context()
	if err := s.admit(ctx, req.GetSecurityToken(), req.GetNamespace()); err != nil {
		return err
	}
	q, err := s.target(ctx, req.GetNamespace(), req.GetSnapshotName(), "snapshot_name")
	if err != nil {
		return err
	}
	q.StartingOffset, q.MaxResults = req.GetStartingOffset(), req.GetMaxResults()
	buf := newAPIBlocks()
	return s.engine.Stream(ctx, q, func(h Header, ext []Extent) error {
		return stream.Send(&api.GetMetadataAllocatedResponse{
			BlockMetadataType: apiStyle(h.Style), VolumeCapacityBytes: h.Capacity, BlockMetadata: buf.fill(ext)})
	})
}

// GetMetadataDelta streams the extents changed from a CSI snapshot (base_snapshot_id, as the
// KEP has it: the base VolumeSnapshot may be gone by the next backup) to a VolumeSnapshot.
func (s *KubeServer) GetMetadataDelta(req *api.GetMetadataDeltaRequest, stream api.SnapshotMetadata_GetMetadataDeltaServer) error {
	ctx := stream.Context()
	if err := s.admit(ctx, req.GetSecurityToken(), req.GetNamespace()); err != nil {
		return err
	}
	base, err := ParseSnapshotID("base_snapshot_id", req.GetBaseSnapshotId())
	if err != nil {
		return err
	}
	q, err := s.target(ctx, req.GetNamespace(), req.GetTargetSnapshotName(), "target_snapshot_name")
	if err != nil {
		return err
	}
	q.Base, q.StartingOffset, q.MaxResults = &base, req.GetStartingOffset(), req.GetMaxResults()
	buf := newAPIBlocks()
	return s.engine.Stream(ctx, q, func(h Header, ext []Extent) error {
		return stream.Send(&api.GetMetadataDeltaResponse{
			BlockMetadataType: apiStyle(h.Style), VolumeCapacityBytes: h.Capacity, BlockMetadata: buf.fill(ext)})
	})
}

func apiStyle(s Style) api.BlockMetadataType {
	if s == Fixed {
		return api.BlockMetadataType_FIXED_LENGTH
	}
	return api.BlockMetadataType_VARIABLE_LENGTH
}

func newAPIBlocks() *blockBuf[api.BlockMetadata] {
	return &blockBuf[api.BlockMetadata]{set: func(m *api.BlockMetadata, e Extent) { m.ByteOffset, m.SizeBytes = e.Offset, e.Length }}
}
