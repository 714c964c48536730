package node

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/holder"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// claim runs before anything is attached. It records this node's Ceph client addresses with
// the volume's attachment (what the controller attributes the image's clients by, and what
// fencing this node blocklists), then, for a SINGLE_NODE_* access mode, refuses with
// FAILED_PRECONDITION while a client at another address holds the image: the second line of
// defence behind ControllerPublishVolume, against a stale publication, a hand-made PV or a CO
// that does not publish.
//
// Clients at this node's own addresses never count: after a crash, the watch of this node's
// own dead FUSE server (the plugin's or the mount holder's) lingers for 30 s, and re-staging
// must not lock the node out; the server itself opens the image after this check. A lock owner without a watch is a dead client
// whose lock librbd breaks, blocklisting it, when the new server takes the lock; watchers
// the blocklist covers are cut off already (a fenced node).
func (s *Server) claim(ctx context.Context, r stageRequest, monHost string) error {
	if s.opts.Pool == nil {
		return nil
	}
	conn, err := s.opts.Pool.Get(ctx, monHost, r.cred)
	if err != nil {
		return err
	}
	defer conn.Release()
	own, err := blocklist.ClientAddrs(ctx, conn)
	if err != nil {
		return err
	}
	loc := radosop.Location{Conn: conn, Pool: r.image.Pool, Namespace: r.image.Namespace}
	// a pre-provisioned volume with a handle of its own has no attachment object to record in;
	// monoceph's volumes and ceph-csi's it took over have
	if key, ok := attachment.Key(r.volumeID); ok && len(own) > 0 {
		if err := s.recordClients(ctx, loc, key, own); err != nil {
			return err
		}
	}
	if !singleNode(r.access.mode) {
		return nil
	}
	holders, err := radosop.With(ctx, loc, "list clients of "+r.image.Name, func(io *rados.IOContext) (holder.Set, error) {
		return holder.List(io, r.image.Name)
	})
	if ceph.Is(err, ceph.ErrNotFound) {
		return nil // the attacher reports the missing image
	}
	if err != nil {
		return err
	}
	others := holders.Except(own)
	if len(others.Live(nil)) == 0 {
		return nil
	}
	bl, err := blocklist.ListBlocklist(ctx, conn)
	if err != nil {
		return err
	}
	if live := others.Live(bl); len(live) > 0 {
		return status.Errorf(codes.FailedPrecondition,
			"image %s is in use by another node (%s; this node is %s): access mode %s allows one node at a time",
			r.image.Name, live, own, r.access.mode)
	}
	return nil
}

// recordClients writes this node's addresses into the volume's attachment object, unless
// they are there already.
func (s *Server) recordClients(ctx context.Context, loc radosop.Location, uid string, own []netip.Addr) error {
	_, err := attachment.Modify(ctx, loc, uid, "record node clients", func(st *attachment.State) error {
		if slices.Equal(st.Clients[s.opts.NodeID].Addrs, own) {
			return nil
		}
		st.Clients[s.opts.NodeID] = attachment.Clients{Addrs: own, At: time.Now().UTC().Truncate(time.Second)}
		return nil
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Recording this node's Ceph client addresses with the volume")
	}
	return err
}

func singleNode(m csi.VolumeCapability_AccessMode_Mode) bool {
	return strings.HasPrefix(m.String(), "SINGLE_NODE_")
}
