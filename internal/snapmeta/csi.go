package snapmeta

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
)

// CSIServer is the CSI SnapshotMetadata service on the CSI socket, for the upstream
// external-snapshot-metadata sidecar or any CSI client.
type CSIServer struct {
	csi.UnimplementedSnapshotMetadataServer
	engine *Engine
}

// NewCSIServer serves e.
func NewCSIServer(e *Engine) *CSIServer { return &CSIServer{engine: e} }

// GetMetadataAllocated streams the allocated extents of a snapshot.
func (s *CSIServer) GetMetadataAllocated(req *csi.GetMetadataAllocatedRequest, stream csi.SnapshotMetadata_GetMetadataAllocatedServer) error {
	target, err := ParseSnapshotID("snapshot_id", req.GetSnapshotId())
	if err != nil {
		return err
	}
	q := Query{Target: target, StartingOffset: req.GetStartingOffset(), MaxResults: req.GetMaxResults(), Secrets: req.GetSecrets()}
	buf := newCSIBlocks()
	return s.engine.Stream(stream.Context(), q, func(h Header, ext []Extent) error {
		return stream.Send(&csi.GetMetadataAllocatedResponse{
			BlockMetadataType: csiStyle(h.Style), VolumeCapacityBytes: h.Capacity, BlockMetadata: buf.fill(ext)})
	})
}

// GetMetadataDelta streams the extents changed between two snapshots of one volume.
func (s *CSIServer) GetMetadataDelta(req *csi.GetMetadataDeltaRequest, stream csi.SnapshotMetadata_GetMetadataDeltaServer) error {
	base, err := ParseSnapshotID("base_snapshot_id", req.GetBaseSnapshotId())
	if err != nil {
		return err
	}
	target, err := ParseSnapshotID("target_snapshot_id", req.GetTargetSnapshotId())
	if err != nil {
		return err
	}
	q := Query{Target: target, Base: &base, StartingOffset: req.GetStartingOffset(), MaxResults: req.GetMaxResults(), Secrets: req.GetSecrets()}
	buf := newCSIBlocks()
	return s.engine.Stream(stream.Context(), q, func(h Header, ext []Extent) error {
		return stream.Send(&csi.GetMetadataDeltaResponse{
			BlockMetadataType: csiStyle(h.Style), VolumeCapacityBytes: h.Capacity, BlockMetadata: buf.fill(ext)})
	})
}

func csiStyle(s Style) csi.BlockMetadataType {
	if s == Fixed {
		return csi.BlockMetadataType_FIXED_LENGTH
	}
	return csi.BlockMetadataType_VARIABLE_LENGTH
}

// blockBuf reuses one message's tuples for the next: Send has serialised them when it
// returns, and a stream of a million extents then costs no million allocations. T is the CSI
// or the Kubernetes-facing BlockMetadata; set fills one from an extent.
type blockBuf[T any] struct {
	items []T
	ptrs  []*T
	set   func(*T, Extent)
}

func (b *blockBuf[T]) fill(ext []Extent) []*T {
	if cap(b.items) < len(ext) {
		b.items = make([]T, len(ext))
		b.ptrs = make([]*T, len(ext))
		for i := range b.items {
			b.ptrs[i] = &b.items[i]
		}
	}
	out := b.ptrs[:len(ext)]
	for i, e := range ext {
		b.set(out[i], e)
	}
	return out
}

func newCSIBlocks() *blockBuf[csi.BlockMetadata] {
	return &blockBuf[csi.BlockMetadata]{set: func(m *csi.BlockMetadata, e Extent) { m.ByteOffset, m.SizeBytes = e.Offset, e.Length }}
}
