package rbd

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	replpb "github.com/csi-addons/spec/lib/go/replication"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/holder"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestMirrorUnpublishPeerDaemon proves that the peer site's rbd-mirror daemon, which watches
// a mirrored primary image to learn of its mirror snapshots, is no node's client: a volume
// published single-node-writer to a node that recorded no client addresses (its plugin
// predates the recording) is unpublished once the node's own client is gone, even though the
// daemon still watches the image, while a client that really has the image open still keeps
// the unpublish back.
func TestMirrorUnpublishPeerDaemon(t *testing.T) {
	cfg, a, b := mirrorSites(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	params := map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "1m"}
	vol := a.createVolume(ctx, t, "mirror-unpub", cfg.Pool, 64<<20, params)
	since := time.Now().Unix()
	if _, err := a.repl.EnableVolumeReplication(ctx, &replpb.EnableVolumeReplicationRequest{ReplicationSource: replSource(vol), Parameters: params, Secrets: a.secrets}); err != nil {
		t.Fatalf("EnableVolumeReplication: %v", err)
	}
	a.waitSynced(ctx, t, vol, since)

	// the precondition: site B's rbd-mirror watches the primary image on A (no one else has it
	// open: these watchers are the daemon's)
	var daemon []string
	for len(daemon) == 0 {
		if err := a.onImageRO(ctx, t, vol, func(img *rbd.Image) error {
			ws, err := img.ListWatchers()
			daemon = nil
			for _, w := range ws {
				daemon = append(daemon, fmt.Sprintf("client.%d at %s", w.Id, strings.TrimPrefix(w.Addr, "v1:")))
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatal("site B's rbd-mirror never watched the primary image on A")
		}
		if len(daemon) == 0 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	t.Logf("watchers of the primary image on A, site B's rbd-mirror: %v", daemon)
	// on B, B's own rbd-mirror writes the secondary copy: it watches it and owns its exclusive
	// lock, and is no client either (a node staging the volume there after a failover would
	// be refused, and a lock owner counted as dead would have its lock broken)
	p, v, _, err := b.ctrl.openVolume(ctx, vol, b.secrets)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Conn.Release()
	for {
		raw, err := radosop.With(ctx, p, "test holders", func(io *rados.IOContext) (string, error) {
			img, err := rbd.OpenImageReadOnly(io, v.image, rbd.NoSnapshot)
			if err != nil {
				return "", err
			}
			defer img.Close()
			ws, err := img.ListWatchers()
			if err != nil {
				return "", err
			}
			_, ls, err := img.ListLockers()
			if len(ws) == 0 || len(ls) == 0 {
				return "", err
			}
			return fmt.Sprintf("watchers %v, lock owners %v", ws, ls), err
		})
		if err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
		if raw != "" {
			hs, err := radosop.With(ctx, p, "test holders", func(io *rados.IOContext) (holder.Set, error) { return holder.List(io, v.image) })
			if err != nil || len(hs) != 0 {
				t.Fatalf("holders of the secondary copy on B, where B's rbd-mirror has it (%s): %v, %v; want none", raw, hs, err)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatal("site B's rbd-mirror never held the secondary copy")
		}
		time.Sleep(250 * time.Millisecond)
	}

	snw := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	if _, err := a.csi.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "node-1", VolumeCapability: snw, Secrets: a.secrets}); err != nil {
		t.Fatalf("ControllerPublishVolume: %v", err)
	}
	unpublish := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-1", Secrets: a.secrets}

	// a client that has the image open (the node's, since the node recorded no addresses) keeps
	// the unpublish back, and the refusal names it, not the daemon
	if err := a.onImage(ctx, t, vol, func(*rbd.Image) error {
		_, err := a.csi.ControllerUnpublishVolume(ctx, unpublish)
		if status.Code(err) != codes.FailedPrecondition {
			return fmt.Errorf("ControllerUnpublishVolume while a client has the image open: %v, want FailedPrecondition", err)
		}
		for _, d := range daemon {
			if id, _, _ := strings.Cut(d, " "); strings.Contains(err.Error(), id+" ") {
				return fmt.Errorf("the refusal counts site B's rbd-mirror (%s) as the node's client: %v", d, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// the node's client gone, only the daemon watches: the node no longer uses the image. (A
	// few tries: the mgr's mirror snapshot scheduler opens the image for a moment each minute.)
	for try := 1; ; try++ {
		start := time.Now()
		_, err := a.csi.ControllerUnpublishVolume(ctx, unpublish)
		if err == nil {
			t.Logf("MEASURED ControllerUnpublishVolume of a mirrored primary watched by the peer's rbd-mirror: %v", time.Since(start).Round(time.Millisecond))
			break
		}
		if try == 5 || status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("ControllerUnpublishVolume with only site B's rbd-mirror watching the image: %v", err)
		}
		time.Sleep(time.Second)
	}
}

// onImageRO opens the volume's image on site s read-only: a handle that registers no watch.
func (s *mirrorSite) onImageRO(ctx context.Context, t *testing.T, vol string, fn func(*rbd.Image) error) error {
	t.Helper()
	return s.onImageOpenedBy(ctx, vol, func(io *rados.IOContext, name string) (*rbd.Image, error) {
		return rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
	}, fn)
}
