package rbd

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"google.golang.org/grpc/codes"
)

func capOf(mode csi.VolumeCapability_AccessMode_Mode, block bool) *csi.VolumeCapability {
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}
	}
	return c
}

func (e *env) publishReq(volID, node string, c *csi.VolumeCapability, ro bool) *csi.ControllerPublishVolumeRequest {
	return &csi.ControllerPublishVolumeRequest{VolumeId: volID, NodeId: node, VolumeCapability: c, Readonly: ro, Secrets: e.cl.Secrets()}
}

func (e *env) unpublish(t *testing.T, volID, node string) error {
	t.Helper()
	_, err := e.client.ControllerUnpublishVolume(ctxT(t), &csi.ControllerUnpublishVolumeRequest{VolumeId: volID, NodeId: node, Secrets: e.cl.Secrets()})
	return err
}

// published reads the nodes a volume is published to, straight from its attachment object.
func (e *env) published(t *testing.T, volID string) []string {
	t.Helper()
	st, err := attachment.Read(ctxT(t), radosop.Location{Conn: e.conn, Pool: e.cl.RBDPool, Namespace: e.ns}, mustVol(t, volID).UID)
	if err != nil {
		t.Fatal(err)
	}
	return st.Nodes()
}

// requireCode is wantCode that ends the test on a mismatch.
func requireCode(t *testing.T, what string, err error, code codes.Code, msgHas ...string) {
	t.Helper()
	if !wantCode(t, what, err, code, msgHas...) {
		t.FailNow()
	}
}

// TestPublishSingleNode: a single-node volume is published to one node at a time; a second
// node gets FAILED_PRECONDITION naming the first, and nothing changes; publishing again is
// idempotent; another capability on the same node is ALREADY_EXISTS.
func TestPublishSingleNode(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("pub-single", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	for range 2 {
		resp, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-a", snw, false))
		if err != nil || len(resp.GetPublishContext()) != 0 {
			t.Fatalf("publish to node-a: %v, %v", resp, err)
		}
	}
	_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-a", snw, true))
	requireCode(t, "read-only publish to the same node", err, codes.AlreadyExists, "node-a")
	for _, c := range []*csi.VolumeCapability{snw, capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, false),
		capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, true)} {
		_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-b", c, false))
		requireCode(t, "publish to node-b as "+c.GetAccessMode().GetMode().String(), err, codes.FailedPrecondition, `"node-a"`, "SINGLE_NODE_WRITER")
	}
	if got := e.published(t, id); strings.Join(got, ",") != "node-a" {
		t.Fatalf("after the refused publishes the volume is published to %v, want node-a only", got)
	}
	if err := e.unpublish(t, id, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := e.unpublish(t, id, "node-a"); err != nil {
		t.Fatalf("second unpublish: %v", err)
	}
	resp, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-b", snw, true))
	if err != nil || resp.GetPublishContext()[PublishContextReadOnly] != "true" {
		t.Fatalf("read-only publish to node-b after node-a let go: %v, %v", resp, err)
	}
	// unpublishing from every node (no node_id), then deleting, leaves nothing behind
	if err := e.unpublish(t, id, ""); err != nil {
		t.Fatal(err)
	}
	if got := e.published(t, id); len(got) != 0 {
		t.Fatalf("published to %v after unpublishing from all nodes", got)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

// TestPublishMultiNode: MULTI_NODE_* publications share the volume; a single-node one then
// conflicts with all of them.
func TestPublishMultiNode(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("pub-multi", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	mnmw := capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, true)
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, n, mnmw, false)); err != nil {
			t.Fatalf("publish raw block to %s: %v", n, err)
		}
	}
	_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-c", capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, true), false))
	requireCode(t, "single-node publish beside two", err, codes.FailedPrecondition, "node-a", "node-b")
	if got := e.published(t, id); strings.Join(got, ",") != "node-a,node-b" {
		t.Fatalf("published to %v", got)
	}
	// the CO deletes without unpublishing (a crashed CO, a forced delete): nothing stays
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

// TestPublishBadInput: wrong requests are refused with the spec's codes and change nothing.
func TestPublishBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("pub-bad", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	missing := strings.Replace(id, mustVol(t, id).UID, "aaaaaaaaaaaaaaaa", 1)
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	for _, c := range []struct {
		name string
		req  *csi.ControllerPublishVolumeRequest
		code codes.Code
	}{
		{"no volume_id", e.publishReq("", "node-a", snw, false), codes.InvalidArgument},
		{"no node_id", e.publishReq(id, "", snw, false), codes.InvalidArgument},
		{"no capability", e.publishReq(id, "node-a", nil, false), codes.InvalidArgument},
		{"filesystem on many writers", e.publishReq(id, "node-a", capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, false), false), codes.InvalidArgument},
		{"malformed volume_id", e.publishReq("not-an-id", "node-a", snw, false), codes.NotFound},
		{"missing volume", e.publishReq(missing, "node-a", snw, false), codes.NotFound},
		{"unknown cluster", e.publishReq(strings.Replace(id, e.cl.ID, "nosuchcluster", 1), "node-a", snw, false), codes.NotFound},
	} {
		_, err := e.client.ControllerPublishVolume(ctx, c.req)
		requireCode(t, c.name, err, c.code)
	}
	if got := e.published(t, id); len(got) != 0 {
		t.Fatalf("bad requests published the volume to %v", got)
	}
	if got := e.published(t, missing); len(got) != 0 {
		t.Fatalf("a publish of a missing volume recorded %v", got)
	}
	// unpublishing what was never published, or a volume that does not exist, is fine
	for _, v := range []string{id, missing, "not-an-id"} {
		if err := e.unpublish(t, v, "node-a"); err != nil {
			t.Fatalf("unpublish %s: %v", v, err)
		}
	}
	_, err = e.client.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{NodeId: "node-a"})
	requireCode(t, "unpublish without volume_id", err, codes.InvalidArgument)
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

// TestUnpublishWaitsForFence: a node that still has the image open (its client at the address
// it recorded, here a process connecting from 127.0.0.2) keeps its single-writer publication:
// unpublish answers FAILED_PRECONDITION until that client is gone or blocklisted, and another
// node cannot be published meanwhile.
func TestUnpublishWaitsForFence(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("pub-fence", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-a", snw, false)); err != nil {
		t.Fatal(err)
	}
	loc := radosop.Location{Conn: e.conn, Pool: e.cl.RBDPool, Namespace: e.ns}
	nodeA := netip.MustParseAddr("127.0.0.2")
	// what node-a's plugin records at NodeStageVolume
	if _, err := attachment.Modify(ctx, loc, mustVol(t, id).UID, "test", func(st *attachment.State) error {
		st.Clients["node-a"] = attachment.Clients{Addrs: []netip.Addr{nodeA}, At: time.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	release := e.cl.HoldImage(t, nodeA.String(), e.cl.RBDPool, e.ns, rbdname.Image(mustVol(t, id).UID), true)
	err = e.unpublish(t, id, "node-a")
	requireCode(t, "unpublish while node-a writes", err, codes.FailedPrecondition, `"node-a"`, "127.0.0.2/32")
	_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-b", snw, false))
	requireCode(t, "publish to node-b meanwhile", err, codes.FailedPrecondition, "node-a")

	// fencing node-a's address lets the unpublish through
	d := blocklist.NewDirect(e.conn, e.cl.ClusterMap()[0], blocklist.Options{Expiry: 10 * time.Minute})
	cidr := []netip.Prefix{netip.PrefixFrom(nodeA, 32)}
	if _, err := d.Fence(ctx, cidr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.Unfence(ctxT(t), cidr) })
	waitFor(t, 30*time.Second, "unpublish of the fenced node", func() error { return e.unpublish(t, id, "node-a") })
	if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-b", snw, false)); err != nil {
		t.Fatalf("publish to node-b after node-a was fenced: %v", err)
	}
	release()
	if _, err := d.Unfence(ctx, cidr); err != nil {
		t.Fatal(err)
	}
	// a node whose client went away normally (unstaged) is unpublished at once
	if _, err := attachment.Modify(ctx, loc, mustVol(t, id).UID, "test", func(st *attachment.State) error {
		st.Clients["node-b"] = attachment.Clients{Addrs: []netip.Addr{nodeA}, At: time.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	release = e.cl.HoldImage(t, nodeA.String(), e.cl.RBDPool, e.ns, rbdname.Image(mustVol(t, id).UID), false)
	requireCode(t, "unpublish while node-b has it open", e.unpublish(t, id, "node-b"), codes.FailedPrecondition)
	release()
	if err := e.unpublish(t, id, "node-b"); err != nil {
		t.Fatalf("unpublish after node-b closed the image: %v", err)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}

// waitFor retries f until it succeeds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v after %v", what, err, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPublishCrashSafety kills the controller right after ControllerPublishVolume recorded the
// node and right after ControllerUnpublishVolume checked the node let go: the record is
// whole (the node is published and excludes others, or it is not), and a retry converges.
func TestPublishCrashSafety(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("pub-crash", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)

	runChild(t, crashOp{Kind: "publish", ID: id, Node: "node-a", NS: e.ns}, "rbd.ControllerPublishVolume.recorded")
	if got := e.published(t, id); strings.Join(got, ",") != "node-a" {
		t.Fatalf("after a kill past the record: published to %v", got)
	}
	_, err = e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-b", snw, false))
	requireCode(t, "publish to node-b after the killed publish to node-a", err, codes.FailedPrecondition, `"node-a"`)
	if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-a", snw, false)); err != nil {
		t.Fatalf("retry of the killed publish: %v", err)
	}

	runChild(t, crashOp{Kind: "unpublish", ID: id, Node: "node-a", NS: e.ns}, "rbd.ControllerUnpublishVolume.checked")
	if got := e.published(t, id); strings.Join(got, ",") != "node-a" {
		t.Fatalf("a kill before the unpublish wrote changed the record: %v", got)
	}
	if err := e.unpublish(t, id, "node-a"); err != nil {
		t.Fatalf("retry of the killed unpublish: %v", err)
	}
	if _, err := e.client.ControllerPublishVolume(ctx, e.publishReq(id, "node-b", snw, false)); err != nil {
		t.Fatalf("publish to node-b after the retried unpublish: %v", err)
	}
	if err := e.unpublish(t, id, "node-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
