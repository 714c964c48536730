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
	limits Limits
	slots  *streamSlots
}

// kubeTimeout bounds the API server lookups before a stream starts (token and access
// reviews, VolumeSnapshot, content, class and Secret reads).
const kubeTimeout = 30 * time.Second

// NewKubeServer serves e to callers that kube authenticates and authorizes, within l.
func NewKubeServer(e *Engine, kube Kube, l Limits) *KubeServer {
	l = l.withDefaults()
	return &KubeServer{engine: e, kube: kube, limits: l, slots: newStreamSlots(l)}
}

// admit takes a stream slot, authenticates the token, takes one of its user's slots, checks
// the request names a namespace, and authorizes the caller to get VolumeSnapshots there.
// Authentication comes first, so an anonymous caller learns nothing about the request's
// validity. leave gives the slots back.
func (s *KubeServer) admit(ctx context.Context, token, namespace string) (leave func(), err error) {
	leaveAll, err := s.slots.enter()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			leaveAll()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	user, err := s.kube.Authenticate(ctx, token)
	if err != nil {
		return nil, err
	}
	leaveUser, err := s.slots.enterUser(user.Username)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			leaveUser()
		}
	}()
	if namespace == "" {
		return nil, status.Error(codes.InvalidArgument, "namespace is missing")
	}
	if err := s.kube.Authorize(ctx, user, namespace); err != nil {
		return nil, err
	}
	return func() { leaveUser(); leaveAll() }, nil
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
	leave, err := s.admit(ctx, req.GetSecurityToken(), req.GetNamespace())
	if err != nil {
		return err
	}
	defer leave()
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
	leave, err := s.admit(ctx, req.GetSecurityToken(), req.GetNamespace())
	if err != nil {
		return err
	}
	defer leave()
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
