package node

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// csiVolume creates an image named the way the controller names volumes and returns it with
// its volume ID, so the node can record its addresses in the volume's attachment object.
func (r *rig) csiVolume() (attach.Image, string) {
	t := r.t
	uid, err := volid.NewUID('c')
	if err != nil {
		t.Fatal(err)
	}
	img := attach.Image{Pool: r.cl.RBDPool, Name: rbdname.Image(uid)}
	var poolID int64
	r.librbd("create "+img.Name, func(io *rados.IOContext) error {
		opts := rbd.NewRbdImageOptions()
		defer opts.Destroy()
		if err := opts.SetUint64(rbd.ImageOptionFeatures, rbd.FeatureLayering|rbd.FeatureExclusiveLock); err != nil {
			return err
		}
		poolID = io.GetPoolID()
		return rbd.CreateImage(io, img.Name, 64*mib, opts)
	}, "")
	t.Cleanup(func() {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := r.tryLibrbd(func(io *rados.IOContext) error {
				_ = io.Delete(attachment.ObjectName(uid))
				return rbd.RemoveImage(io, img.Name)
			}, "")
			if err == nil || time.Now().After(deadline) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	return img, volid.RBDVolume{ClusterID: r.cl.ID, PoolID: poolID, UID: uid}.String()
}

// TestStageRefusesAnotherNodesClient: NodeStageVolume of a single-node volume refuses while a
// client at another address (another node, here a process connecting from 127.0.0.2) holds the
// image, and sets nothing up; a reader-only many-node volume stages beside it; once that
// client's address is fenced the volume stages. Every stage records this node's address with
// the volume.
func TestStageRefusesAnotherNodesClient(t *testing.T) {
	r := newRig(t)
	img, vol := r.csiVolume()
	base := r.workspace(vol)
	staging := filepath.Join(base, "staging")
	if err := os.MkdirAll(staging, 0o750); err != nil { // the CO's
		t.Fatal(err)
	}
	release := r.cl.HoldImage(t, "127.0.0.2", img.Pool, "", img.Name, true)

	err := r.stage(vol, staging, img, mountCap("ext4", rwo))
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "127.0.0.2") {
		t.Fatalf("stage while another node writes: %v, want FAILED_PRECONDITION naming 127.0.0.2", err)
	}
	assertUnstaged(t, r, vol, staging, base)
	for _, mode := range []csi.VolumeCapability_AccessMode_Mode{csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER} {
		if err := r.stage(vol, staging, img, blockCap(mode)); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("stage %s while another node writes: %v, want FAILED_PRECONDITION", mode, err)
		}
	}
	// shared raw block: the application coordinates its writers
	if err := r.stage(vol, staging, img, blockCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)); err != nil {
		t.Fatalf("multi-node stage beside another node: %v", err)
	}
	if err := r.unstage(vol, staging); err != nil {
		t.Fatal(err)
	}
	own, err := blocklist.ClientAddrs(r.ctx, r.conn)
	if err != nil {
		t.Fatal(err)
	}
	st, err := attachment.Read(r.ctx, radosop.Location{Conn: r.conn, Pool: img.Pool}, strings.TrimPrefix(img.Name, rbdname.VolumePrefix))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Clients[r.s.opts.NodeID].Addrs; !slices.Equal(got, own) || len(own) == 0 {
		t.Fatalf("recorded addresses of %s: %v, want this process's %v", r.s.opts.NodeID, got, own)
	}

	// the other node is fenced: its client is cut off, and its lock is broken by our rbd-fuse
	d := blocklist.NewDirect(r.conn, r.cl.ClusterMap()[0], blocklist.Options{Expiry: 10 * time.Minute})
	other := []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
	if _, err := d.Fence(r.ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.Unfence(r.ctx, other) })
	if err := r.stage(vol, staging, img, mountCap("ext4", rwo)); err != nil {
		t.Fatalf("stage after the other node was fenced: %v", err)
	}
	if err := r.unstage(vol, staging); err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := d.Unfence(r.ctx, other); err != nil {
		t.Fatal(err)
	}
	assertUnstaged(t, r, vol, staging, base)
	r.assertNoKeyOnDisk()
}
