package rbd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// origin is what a new volume is cloned from: an image, and for a snapshot source the RBD
// snapshot on it. For monoceph's own IDs everything follows from the ID; for ceph-csi handles
// the journal names the image (a ceph-csi snapshot is a clone image carrying one snapshot of
// its own name).
type origin struct {
	loc   radosop.Location
	image string
	snap  string // "" for a volume source
	what  string // how messages name the source
	// csi is the source's ceph-csi handle, nil for monoceph's own
	csi *volid.Handle
	// member is a group snapshot member source: its snapshot lives in the group snapshot
	// namespace, reached by ID only (restoreMember), never by the name in snap
	member *volid.RBDSnapshot
}

// attr is what the journal records for a ceph-csi origin so that a retried delete of the
// clone can purge a trashed parent even after the source's own journal entry is gone:
// <pool ID>/<namespace>/<image>.
func (o origin) attr(poolID int64) string {
	if o.csi == nil {
		return ""
	}
	return fmt.Sprintf("%d/%s/%s", poolID, o.loc.Namespace, o.image)
}

func parseOriginAttr(s string) *trashedImage {
	parts := strings.SplitN(s, "/", 3)
	if len(parts) != 3 {
		return nil
	}
	id, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return nil
	}
	return &trashedImage{poolID: id, ns: parts[1], name: parts[2]}
}

// csiLocation is where a ceph-csi handle's image and journal entry live: the pool the handle
// names and the namespace of the cluster map's rbd.radosNamespace (ceph-csi takes it from the
// same key of its config.json).
func (c *Controller) csiLocation(ctx context.Context, conn *ceph.Conn, h volid.Handle) (radosop.Location, error) {
	cl, err := c.csiCluster(h.ClusterID, codes.NotFound, h.String())
	if err != nil {
		return radosop.Location{}, err
	}
	pool, err := poolByID(ctx, conn, h.LocationID)
	if err != nil {
		return radosop.Location{}, err
	}
	return radosop.Location{Conn: conn, Pool: pool, Namespace: cl.RBD.RadosNamespace}, nil
}

// csiEntry reads the journal entry of a ceph-csi handle; a missing entry, or one ceph-csi never
// finished writing, is NOT_FOUND for what.
func (c *Controller) csiEntry(ctx context.Context, loc radosop.Location, k cephcsi.Kind, h volid.Handle, what string) (*cephcsi.Entry, error) {
	e, err := cephcsi.Read(ctx, loc, k, h.UUID)
	if err != nil {
		return nil, err
	}
	if e == nil || e.Name == "" {
		return nil, controller.NotFoundf("%s does not exist", what)
	}
	return e, nil
}

// refuseEncrypted is the answer for a ceph-csi volume (or a snapshot of one) that ceph-csi
// encrypted: monoceph has no encryption, and handing out its ciphertext as a plain volume
// would be worse than refusing.
func refuseEncrypted(e *cephcsi.Entry, what string) error {
	if !e.Encrypted() {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "%s is encrypted by ceph-csi (KMS %q, type %q): monoceph does not support encryption",
		what, e.Attrs[cephcsi.KeyEncryptKMS], e.Attrs[cephcsi.KeyEncryptionType])
}

// resolveSource finds what a content source names. A source that does not exist is NOT_FOUND.
func (c *Controller) resolveSource(ctx context.Context, conn *ceph.Conn, src source) (origin, error) {
	switch {
	case src.Snap != nil && src.Snap.CSI != nil:
		h := *src.Snap.CSI
		o := origin{what: "source snapshot " + h.String(), csi: &h}
		loc, err := c.csiLocation(ctx, conn, h)
		if err != nil {
			return o, orNotFound(err, o.what)
		}
		e, err := c.csiEntry(ctx, loc, cephcsi.Snapshots, h, o.what)
		if err != nil {
			return o, err
		}
		if err := refuseEncrypted(e, o.what); err != nil {
			return o, err
		}
		o.loc, o.image, o.snap = loc, e.ImageName(), e.ImageName()
		return o, nil
	case src.Vol != nil && src.Vol.CSI != nil:
		h := *src.Vol.CSI
		o := origin{what: "source volume " + h.String(), csi: &h}
		loc, err := c.csiLocation(ctx, conn, h)
		if err != nil {
			return o, orNotFound(err, o.what)
		}
		e, err := c.csiEntry(ctx, loc, cephcsi.Volumes, h, o.what)
		if err != nil {
			return o, err
		}
		if err := refuseEncrypted(e, o.what); err != nil {
			return o, err
		}
		o.loc, o.image = loc, e.ImageName()
		return o, nil
	case src.Snap != nil:
		s := src.Snap.Own
		o := origin{what: "source snapshot " + s.String(), image: rbdname.Image(s.UID), snap: rbdname.Snapshot(s.SnapUID)}
		if s.Member {
			o.member = &s
		}
		pool, err := poolByID(ctx, conn, s.PoolID)
		if err != nil {
			return o, orNotFound(err, o.what)
		}
		o.loc = radosop.Location{Conn: conn, Pool: pool, Namespace: s.Namespace}
		return o, nil
	case src.Vol != nil:
		v := src.Vol.Own
		o := origin{what: "source volume " + v.String(), image: rbdname.Image(v.UID)}
		pool, err := poolByID(ctx, conn, v.PoolID)
		if err != nil {
			return o, orNotFound(err, o.what)
		}
		o.loc = radosop.Location{Conn: conn, Pool: pool, Namespace: v.Namespace}
		return o, nil
	}
	return origin{}, nil
}

// size checks the origin exists (a snapshot source: its snapshot; a volume source: the image,
// not a deleted one kept for its snapshots) and returns its size.
func (o origin) size(ctx context.Context) (uint64, error) {
	if o.member != nil {
		info, err := memberSnapshot(ctx, o.loc, *o.member)
		return info.Size, err
	}
	return radosop.With(ctx, o.loc, "inspect "+o.what, func(io *rados.IOContext) (uint64, error) {
		st, err := inspect(io, o.image)
		if err != nil {
			return 0, err
		}
		if o.snap == "" {
			if !st.exists || st.deleted {
				return 0, controller.NotFoundf("%s does not exist", o.what)
			}
			return st.size, nil
		}
		s, ok := st.hasSnap(o.snap)
		if !st.exists || !ok {
			return 0, controller.NotFoundf("%s does not exist", o.what)
		}
		return s.Size, nil
	})
}
