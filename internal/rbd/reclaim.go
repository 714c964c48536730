package rbd

import (
	"context"
	"errors"
	"syscall"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	identitypb "github.com/csi-addons/spec/lib/go/identity"
	rspb "github.com/csi-addons/spec/lib/go/reclaimspace"
	"github.com/monoceph/monoceph/internal/radosop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// ReclaimSpace is the csi-addons ReclaimSpaceController service of an RBD controller: it
// sparsifies (rbd sparsify) an image nobody has open, giving back the RADOS objects whose
// content is all zeros. An image in use is left to the node, whose NodeReclaimSpace trims the
// mounted filesystem; librbd would otherwise take the exclusive lock from the node's client
// in the middle of its writes.
type ReclaimSpace struct {
	rspb.UnimplementedReclaimSpaceControllerServer
	c *Controller
}

// ReclaimSpace returns the csi-addons ReclaimSpaceController of c.
func (c *Controller) ReclaimSpace() *ReclaimSpace { return &ReclaimSpace{c: c} }

// Register adds the service to a gRPC server.
func (r *ReclaimSpace) Register(s grpc.ServiceRegistrar) {
	rspb.RegisterReclaimSpaceControllerServer(s, r)
}

// Capabilities are the service's: offline reclaim (the image must not be in use).
func (*ReclaimSpace) Capabilities() []*identitypb.Capability {
	return []*identitypb.Capability{{Type: &identitypb.Capability_ReclaimSpace_{ReclaimSpace: &identitypb.Capability_ReclaimSpace{
		Type: identitypb.Capability_ReclaimSpace_OFFLINE}}}}
}

// ControllerReclaimSpace sparsifies the volume's image when no client has it open; an image
// in use answers OK without touching it, as ceph-csi does, so a ReclaimSpaceJob of a mounted
// volume succeeds through its node half. The usage reported is what `rbd du` reports
// (allocated objects, from the object map where the image has one) before and after.
func (r *ReclaimSpace) ControllerReclaimSpace(ctx context.Context, req *rspb.ControllerReclaimSpaceRequest) (*rspb.ControllerReclaimSpaceResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	ctx, unlock, err := r.c.opts.Locks.TryLockContext(ctx, "ControllerReclaimSpace", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	secrets, err := r.c.publishSecrets(ctx, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	p, v, st, err := r.c.openVolume(ctx, raw, secrets)
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	log := klog.FromContext(ctx).WithValues("volumeID", raw, "image", v.image)
	if st.watches > 0 {
		log.V(2).Info("Image in use, not sparsified: its node reclaims the space", "watchers", st.watches)
		return &rspb.ControllerReclaimSpaceResponse{}, nil
	}
	u, err := radosop.With(ctx, p, "sparsify", func(io *rados.IOContext) (usage, error) {
		return sparsify(ctx, io, v.image)
	})
	if errors.Is(err, errInUse) {
		log.V(2).Info("Image opened meanwhile, not sparsified: its node reclaims the space")
		return &rspb.ControllerReclaimSpaceResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	log.V(2).Info("Image sparsified", "usedBefore", u.pre, "usedAfter", u.post)
	return &rspb.ControllerReclaimSpaceResponse{
		PreUsage:  &rspb.StorageConsumption{UsageBytes: int64(u.pre)},
		PostUsage: &rspb.StorageConsumption{UsageBytes: int64(u.post)},
	}, nil
}

// errInUse: another client opened the image between the check and the sparsify.
var errInUse = errors.New("image in use")

// usage is an image's allocated bytes before and after a sparsify.
type usage struct{ pre, post uint64 }

// sparsify opens image for writing and, when this is its only client (the watch of its own
// open is the one watcher), deallocates its runs of zeros a RADOS object long. It stops at
// the next object when ctx ends (librbd asks its progress callback after each one).
func sparsify(ctx context.Context, io *rados.IOContext, image string) (usage, error) {
	img, err := rbd.OpenImage(io, image, rbd.NoSnapshot)
	if err != nil {
		return usage{}, err
	}
	defer img.Close()
	if w, err := img.ListWatchers(); err != nil {
		return usage{}, err
	} else if len(w) > 1 {
		return usage{}, errInUse
	}
	var u usage
	if u.pre, err = allocated(img); err != nil {
		return u, err
	}
	info, err := img.Stat()
	if err != nil {
		return u, err
	}
	stop := func(uint64, uint64, any) int {
		if ctx.Err() != nil {
			return -int(syscall.ECANCELED)
		}
		return 0
	}
	if err := img.SparsifyWithProgress(uint(1)<<info.Order, stop, nil); err != nil {
		if ctx.Err() != nil {
			return u, ctx.Err()
		}
		return u, err
	}
	u.post, err = allocated(img)
	return u, err
}

// allocated is what `rbd du` reports as used: the image's allocated extents (whole objects,
// from the object map with fast-diff), its parent's left out.
func allocated(img *rbd.Image) (uint64, error) {
	size, err := img.GetSize()
	if err != nil {
		return 0, err
	}
	var n uint64
	err = img.DiffIterate(rbd.DiffIterateConfig{
		SnapName: rbd.NoSnapshot, Offset: 0, Length: size,
		IncludeParent: rbd.ExcludeParent, WholeObject: rbd.EnableWholeObject,
		Callback: func(_, length uint64, exists int, _ any) int {
			if exists != 0 {
				n += length
			}
			return 0
		},
	})
	return n, err
}
