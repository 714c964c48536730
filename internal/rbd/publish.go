package rbd

import (
	"context"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/holder"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// PublishContextReadOnly is the publish_context key telling NodeStageVolume that the volume
// was published read-only (PUBLISH_READONLY).
const PublishContextReadOnly = "readonly"

// NodeChecker tells whether a node ID names a node of the cluster.
type NodeChecker interface {
	NodeExists(ctx context.Context, nodeID string) (bool, error)
}

// publishRequest is a checked ControllerPublishVolumeRequest.
type publishRequest struct {
	volumeID, nodeID string
	pub              attachment.Publication
}

func parsePublish(req *csi.ControllerPublishVolumeRequest) (publishRequest, error) {
	r := publishRequest{volumeID: req.GetVolumeId(), nodeID: req.GetNodeId()}
	switch {
	case r.volumeID == "":
		return r, status.Error(codes.InvalidArgument, "volume_id is missing")
	case r.nodeID == "":
		return r, status.Error(codes.InvalidArgument, "node_id is missing")
	case req.GetVolumeCapability() == nil:
		return r, status.Error(codes.InvalidArgument, "volume_capability is missing")
	}
	if reason := support.Check([]*csi.VolumeCapability{req.GetVolumeCapability()}); reason != "" {
		return r, status.Error(codes.InvalidArgument, "volume_capability: "+strings.TrimPrefix(reason, "volume_capabilities[0]: "))
	}
	r.pub = attachment.Publication{Mode: req.GetVolumeCapability().GetAccessMode().GetMode().String(), ReadOnly: req.GetReadonly()}
	return r, nil
}

// ControllerPublishVolume records that the volume is published to a node, in the volume's
// attachment object (one version-guarded write). A volume published with a SINGLE_NODE_*
// access mode, or asked for with one, is published to one node at a time: a second node gets
// FAILED_PRECONDITION naming the node that has it, and nothing changes. MULTI_NODE_* modes
// (raw block shared by a clustered application, read-only many) may be published to many
// nodes. Publishing again to the same node with the same mode and read-only flag succeeds; with
// others it is ALREADY_EXISTS.
func (c *Controller) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	r, err := parsePublish(req)
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "ControllerPublishVolume", r.volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	secrets, err := c.publishSecrets(ctx, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	p, v, _, err := c.openVolume(ctx, r.volumeID, secrets)
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	if err := c.checkNode(ctx, r.nodeID); err != nil {
		return nil, err
	}
	_, err = attachment.Modify(ctx, p, attachment.KeyOf(v.id), "publish volume", func(st *attachment.State) error {
		if cur, ok := st.Published[r.nodeID]; ok {
			if cur != r.pub {
				return status.Errorf(codes.AlreadyExists, "volume %q is published to node %q as %s, not as %s", r.volumeID, r.nodeID, describe(cur), describe(r.pub))
			}
			return nil
		}
		if others := exclusiveWith(*st, r.nodeID, r.pub); len(others) > 0 {
			return status.Errorf(codes.FailedPrecondition, "volume %q is published to node %s; %s allows one node at a time: it must be unpublished there first",
				r.volumeID, quoted(others), describe(firstSingle(*st, others, r.pub)))
		}
		st.Published[r.nodeID] = r.pub
		return nil
	})
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.ControllerPublishVolume.recorded")
	klog.FromContext(ctx).V(2).Info("Volume published", "node", r.nodeID, "mode", r.pub.Mode, "readOnly", r.pub.ReadOnly)
	resp := &csi.ControllerPublishVolumeResponse{}
	if r.pub.ReadOnly {
		resp.PublishContext = map[string]string{PublishContextReadOnly: "true"}
	}
	return resp, nil
}

func describe(p attachment.Publication) string {
	if p.ReadOnly {
		return p.Mode + " (read-only)"
	}
	return p.Mode
}

// exclusiveWith returns the other nodes that keep pub from being added for node: all of them
// when pub or any existing publication is single-node.
func exclusiveWith(st attachment.State, node string, pub attachment.Publication) []string {
	single := pub.SingleNode()
	var others []string
	for _, n := range st.Nodes() {
		if n == node {
			continue
		}
		others = append(others, n)
		single = single || st.Published[n].SingleNode()
	}
	if !single {
		return nil
	}
	return others
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// firstSingle is the single-node publication that makes a conflict (for the message).
func firstSingle(st attachment.State, others []string, want attachment.Publication) attachment.Publication {
	for _, n := range others {
		if p := st.Published[n]; p.SingleNode() {
			return p
		}
	}
	return want
}

// checkNode answers NOT_FOUND for a node ID that names no node, where the controller can
// tell (see Options.Nodes).
func (c *Controller) checkNode(ctx context.Context, nodeID string) error {
	if c.opts.Nodes == nil {
		return nil
	}
	ok, err := c.opts.Nodes.NodeExists(ctx, nodeID)
	if err != nil {
		return status.Errorf(codes.Unavailable, "cannot tell whether node %q exists: %v", nodeID, err)
	}
	if !ok {
		return status.Errorf(codes.NotFound, "node %q does not exist", nodeID)
	}
	return nil
}

// publishSecrets are the request's secrets, or the controller's own (Options.Secrets) for a
// request without any: volumes provisioned before their StorageClass named a
// controller-publish secret, whose PersistentVolumes cannot gain one (spec.csi is immutable).
func (c *Controller) publishSecrets(ctx context.Context, secrets map[string]string) (map[string]string, error) {
	if len(secrets) > 0 || c.opts.Secrets == nil {
		return secrets, nil
	}
	s, err := c.opts.Secrets(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "the request carries no secrets and the controller's own could not be read: %v", err)
	}
	return s, nil
}

// ControllerUnpublishVolume removes a node's publication and the client addresses it
// recorded (with no node_id: every node's). A single-node writer is removed only once the
// node no longer has the image open, or its clients are cut off by the OSD blocklist: a node
// the CO gave up on (force-detached after a timeout, or out of service) may still be writing,
// and removing its publication would let another node write beside it. Until then the answer
// is FAILED_PRECONDITION and the CO retries; fencing the node (the out-of-service taint, or a
// NetworkFence) lets it through.
func (c *Controller) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	id, err := parseVolumeID(raw)
	if err != nil {
		return &csi.ControllerUnpublishVolumeResponse{}, nil // names no volume: published nowhere
	}
	cl, err := c.volumeCluster(id, codes.FailedPrecondition, "volume_id")
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "ControllerUnpublishVolume", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	secrets, err := c.publishSecrets(ctx, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	p, image, gone, err := c.attachmentSite(ctx, cl, id, secrets)
	if gone {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer p.Conn.Release()
	st, err := attachment.Read(ctx, p, attachment.KeyOf(id))
	if err != nil {
		return nil, err
	}
	targets := []string{req.GetNodeId()}
	if req.GetNodeId() == "" {
		targets = st.Nodes()
	}
	for _, n := range targets {
		if err := c.checkReleased(ctx, p, id, image, st, n); err != nil {
			return nil, err
		}
	}
	faultpoint.Hit("rbd.ControllerUnpublishVolume.checked")
	_, err = attachment.Modify(ctx, p, attachment.KeyOf(id), "unpublish volume", func(st *attachment.State) error {
		for _, n := range targets {
			delete(st.Published, n)
			delete(st.Clients, n)
		}
		if req.GetNodeId() == "" {
			clear(st.Clients)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Volume unpublished", "nodes", targets)
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// checkReleased returns FAILED_PRECONDITION while node, published as a single-node writer,
// still has live clients of the image. Its clients are those at the addresses its plugin
// recorded; a node published before plugins recorded addresses is taken to own every client
// when it is the only node the volume is published to.
func (c *Controller) checkReleased(ctx context.Context, p radosop.Location, id volumeID, image string, st attachment.State, node string) error {
	pub, ok := st.Published[node]
	if !ok || !pub.SingleNode() || !pub.Writer() {
		return nil
	}
	holders, err := radosop.With(ctx, p, "list clients of "+image, func(io *rados.IOContext) (holder.Set, error) {
		hs, err := holder.List(io, image)
		if isNotFound(err) {
			return nil, nil
		}
		return hs, err
	})
	if err != nil {
		return err
	}
	addrs := st.Clients[node].Addrs
	var mine holder.Set
	switch {
	case len(addrs) > 0:
		mine = holders.At(addrs)
	case len(st.Published) == 1:
		mine = holders
	}
	if len(mine.Live(nil)) == 0 {
		return nil
	}
	bl, err := blocklist.ListBlocklist(ctx, p.Conn)
	if err != nil {
		return err
	}
	live := mine.Live(bl)
	if len(live) == 0 {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"node %q still has volume %s open (%s) and is not fenced: unpublishing it would let another node write beside it; "+
			"the node must unstage the volume first, or be fenced (taint it node.kubernetes.io/out-of-service, or fence %s with a NetworkFence)",
		node, id.String(), live, addrList(live))
}

// attachmentSite is where ControllerUnpublishVolume finds a volume's attachment object and
// image: for monoceph's volumes the place its ID names, for ceph-csi's the pool and image their
// journal entry names. gone: the pool or ceph-csi's journal entry is gone, and with it every
// publication (DeleteVolume removes the attachment object before the entry). The caller
// releases the connection.
func (c *Controller) attachmentSite(ctx context.Context, cl v1.Cluster, id volumeID, secrets map[string]string) (radosop.Location, string, bool, error) {
	if id.CSI == nil {
		p, gone, err := c.locate(ctx, cl, id.Own.PoolID, id.Own.Namespace, secrets)
		return p, rbdname.Image(id.Own.UID), gone, err
	}
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return radosop.Location{}, "", false, err
	}
	loc, err := c.csiLocation(ctx, conn, *id.CSI)
	var e *cephcsi.Entry
	if err == nil {
		// an encrypted volume is not refused here: it was never published, and unpublishing
		// it must succeed
		e, err = cephcsi.Read(ctx, loc, cephcsi.Volumes, id.CSI.UUID)
	}
	if err == nil && e != nil && e.Name != "" {
		return loc, e.ImageName(), false, nil
	}
	conn.Release()
	if err == nil || isNotFound(err) {
		return radosop.Location{}, "", true, nil
	}
	return radosop.Location{}, "", false, err
}

// addrList names the distinct addresses of holders, as CIDRs to fence.
func addrList(hs holder.Set) string {
	var out []string
	seen := map[netip.Addr]bool{}
	for _, h := range hs {
		if !seen[h.Addr] {
			seen[h.Addr] = true
			out = append(out, netip.PrefixFrom(h.Addr, h.Addr.BitLen()).String())
		}
	}
	return strings.Join(out, ", ")
}
