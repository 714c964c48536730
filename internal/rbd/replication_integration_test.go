package rbd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	replpb "github.com/csi-addons/spec/lib/go/replication"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// mirrorConfig is the file scripts/ceph-mirror.sh writes (MONOCEPH_MIRROR_CONFIG).
type mirrorConfig struct {
	Script string `json:"script"`
	Pool   string `json:"pool"`
	Sites  []struct {
		Name      string `json:"name"`
		ClusterID string `json:"clusterID"`
		Monitors  string `json:"monitors"`
		AdminID   string `json:"adminID"`
		AdminKey  string `json:"adminKey"`
		PoolID    int64  `json:"poolID"`
		Dir       string `json:"dir"`
	} `json:"sites"`
}

// mirrorSite is one site's controller (CSI and csi-addons replication behind real gRPC) and
// an admin connection.
type mirrorSite struct {
	name    string
	ctrl    *Controller
	csi     csi.ControllerClient
	repl    replpb.ControllerClient
	secrets map[string]string
	cluster string
}

// mirrorSites starts a controller per site of the pair scripts/ceph-mirror.sh runs. Site B's
// cluster map names site A under rbd.mirrorPeers, its pool ID mapped to B's: B resolves A's
// volume IDs. Without the pair the test skips, as the two-zone tests do: make test runs on one
// cluster, and make test-mirror, which starts the pair, fails on a skip.
func mirrorSites(t *testing.T) (mirrorConfig, *mirrorSite, *mirrorSite) {
	t.Helper()
	path := os.Getenv("MONOCEPH_MIRROR_CONFIG")
	if path == "" {
		t.Skip("needs the mirrored cluster pair of scripts/ceph-mirror.sh (make test-mirror)")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("MONOCEPH_MIRROR_CONFIG: %v", err)
	}
	var cfg mirrorConfig
	if err := json.Unmarshal(data, &cfg); err != nil || len(cfg.Sites) != 2 {
		t.Fatalf("MONOCEPH_MIRROR_CONFIG %s: want two sites: %v", path, err)
	}
	a, b := cfg.Sites[0], cfg.Sites[1]
	if a.PoolID == b.PoolID {
		t.Fatalf("pool %s has ID %d on both sites: the identity mapping would go untested", cfg.Pool, a.PoolID)
	}
	maps := []string{
		fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q]}]`, a.ClusterID, a.Monitors),
		fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q],"rbd":{"mirrorPeers":[{"clusterID":%q,"poolIDs":{"%d":%d}}]}}]`,
			b.ClusterID, b.Monitors, a.ClusterID, a.PoolID, b.PoolID),
	}
	var sites []*mirrorSite
	for i, s := range cfg.Sites {
		dir := t.TempDir()
		mp := filepath.Join(dir, "clusters.json")
		if err := os.WriteFile(mp, []byte(maps[i]), 0o600); err != nil {
			t.Fatal(err)
		}
		store, err := clustermap.Load(mp)
		if err != nil {
			t.Fatal(err)
		}
		pool := ceph.NewPool(ceph.PoolOptions{Timeouts: ceph.Timeouts{Connect: 5 * time.Second, Op: 20 * time.Second}})
		t.Cleanup(pool.Close)
		ctrl := NewController(Options{Clusters: store, Pool: pool, Locks: oplock.New()})
		g, err := server.NewGRPC("unix://"+filepath.Join(dir, "csi.sock"), server.NewMetrics(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		csi.RegisterControllerServer(g.Server, ctrl)
		ctrl.Replication().Register(g.Server)
		go func() { _ = g.Serve() }()
		t.Cleanup(func() { g.Shutdown(5 * time.Second) })
		cc, err := grpc.NewClient("unix://"+g.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		sites = append(sites, &mirrorSite{name: s.Name, ctrl: ctrl, csi: csi.NewControllerClient(cc), repl: replpb.NewControllerClient(cc),
			secrets: map[string]string{ceph.SecretUserID: s.AdminID, ceph.SecretUserKey: s.AdminKey}, cluster: s.ClusterID})
	}
	return cfg, sites[0], sites[1]
}

const recordSize = 4096

func record(i int, site string) []byte {
	b := make([]byte, recordSize)
	copy(b, fmt.Sprintf("record %08d written on site %s\n", i, site))
	return b
}

// onImage opens the volume's image on site s, found through s's own cluster map.
func (s *mirrorSite) onImage(ctx context.Context, t *testing.T, vol string, fn func(*rbd.Image) error) error {
	t.Helper()
	return s.onImageOpenedBy(ctx, vol, func(io *rados.IOContext, name string) (*rbd.Image, error) {
		return rbd.OpenImage(io, name, rbd.NoSnapshot)
	}, fn)
}

// onImageOpenedBy runs fn on the volume's image on site s, opened by open (read-write or not).
func (s *mirrorSite) onImageOpenedBy(ctx context.Context, vol string, open func(*rados.IOContext, string) (*rbd.Image, error), fn func(*rbd.Image) error) error {
	p, v, _, err := s.ctrl.openVolume(ctx, vol, s.secrets)
	if err != nil {
		return err
	}
	defer p.Conn.Release()
	_, err = radosop.With(ctx, p, "test image", func(io *rados.IOContext) (struct{}, error) {
		img, err := open(io, v.image)
		if err != nil {
			return struct{}{}, err
		}
		defer img.Close()
		return struct{}{}, fn(img)
	})
	return err
}

// createVolume makes a volume of size in pool on site s for one test; when the test ends its
// replication is disabled (best effort: it may never have been mirrored, or be already) and it
// is deleted.
func (s *mirrorSite) createVolume(ctx context.Context, t *testing.T, prefix, pool string, size int64, params map[string]string) string {
	t.Helper()
	cv, err := s.csi.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()),
		CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: mountCap,
		Parameters: map[string]string{"clusterID": s.cluster, "pool": pool}, Secrets: s.secrets})
	if err != nil {
		t.Fatal(err)
	}
	vol := cv.GetVolume().GetVolumeId()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = s.repl.DisableVolumeReplication(ctx, &replpb.DisableVolumeReplicationRequest{ReplicationSource: replSource(vol), Parameters: params, Secrets: s.secrets})
		if _, err := s.csi.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: vol, Secrets: s.secrets}); err != nil {
			t.Errorf("DeleteVolume: %v", err)
		}
	})
	return vol
}

// writeRecords writes records [from, to) and flushes them.
func (s *mirrorSite) writeRecords(ctx context.Context, t *testing.T, vol string, from, to int) error {
	t.Helper()
	return s.onImage(ctx, t, vol, func(img *rbd.Image) error {
		for i := from; i < to; i++ {
			if _, err := img.WriteAt(record(i, s.name), int64(i)*recordSize); err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
		}
		return img.Flush()
	})
}

// checkRecords reads records [0, n) on s: each must be there, written on one of the sites.
func (s *mirrorSite) checkRecords(ctx context.Context, t *testing.T, vol string, n int, writers map[int]string) {
	t.Helper()
	err := s.onImage(ctx, t, vol, func(img *rbd.Image) error {
		buf := make([]byte, recordSize)
		for i := 0; i < n; i++ {
			if _, err := img.ReadAt(buf, int64(i)*recordSize); err != nil {
				return err
			}
			if want := record(i, writers[i]); !bytes.Equal(buf, want) {
				return fmt.Errorf("record %d on site %s: got %q, want %q", i, s.name, bytes.TrimRight(buf[:64], "\x00"), bytes.TrimRight(want[:64], "\x00"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func replSource(vol string) *replpb.ReplicationSource {
	return &replpb.ReplicationSource{Type: &replpb.ReplicationSource_Volume{Volume: &replpb.ReplicationSource_VolumeSource{VolumeId: vol}}}
}

// promoteUntil calls PromoteVolume on s until it succeeds (a planned promote waits for the
// demotion to reach s) and returns the time from the first call to a successful write there.
func (s *mirrorSite) promoteUntil(ctx context.Context, t *testing.T, vol string, force bool, params map[string]string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, err := s.repl.PromoteVolume(ctx, &replpb.PromoteVolumeRequest{ReplicationSource: replSource(vol), Force: force, Parameters: params, Secrets: s.secrets})
		if err == nil {
			break
		}
		// the demotion not here yet: UNAVAILABLE while the peer's daemon reports up (else
		// FAILED_PRECONDITION, on which csi-addons would force)
		if code := status.Code(err); (code != codes.Unavailable && code != codes.FailedPrecondition) || ctx.Err() != nil {
			t.Fatalf("PromoteVolume on site %s: %v", s.name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// writable: a write through librbd succeeds (the image is primary and its lock is ours)
	for {
		err := s.onImage(ctx, t, vol, func(img *rbd.Image) error {
			if _, err := img.WriteAt(make([]byte, 512), 1<<30-512); err != nil {
				return err
			}
			return img.Flush()
		})
		if err == nil {
			return time.Since(start)
		}
		if ctx.Err() != nil {
			t.Fatalf("site %s never writable after promote: %v", s.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSynced waits until the primary p reports a sync of a mirror snapshot taken at or after
// since (seconds), and returns how long that took from the call.
func (p *mirrorSite) waitSynced(ctx context.Context, t *testing.T, vol string, since int64) time.Duration {
	t.Helper()
	start := time.Now()
	var last error
	for ctx.Err() == nil {
		resp, err := p.repl.GetVolumeReplicationInfo(ctx, &replpb.GetVolumeReplicationInfoRequest{ReplicationSource: replSource(vol), Secrets: p.secrets})
		if err == nil && resp.GetLastSyncTime().GetSeconds() >= since {
			return time.Since(start)
		}
		if err != nil && status.Code(err) != codes.NotFound {
			t.Fatalf("GetVolumeReplicationInfo on site %s: %v", p.name, err)
		}
		last = err
		if resp != nil {
			last = fmt.Errorf("last sync %v, status %v %q", resp.GetLastSyncTime().AsTime(), resp.GetStatus(), resp.GetStatusMessage())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("site %s: no sync since %d: %v", p.name, since, last)
	return 0
}

// mirrorSnapshot takes a mirror snapshot of the primary image now and returns its time.
func (p *mirrorSite) mirrorSnapshot(ctx context.Context, t *testing.T, vol string) int64 {
	t.Helper()
	var sec int64
	err := p.onImage(ctx, t, vol, func(img *rbd.Image) error {
		id, err := img.CreateMirrorSnapshot()
		if err != nil {
			return err
		}
		ts, err := img.GetSnapTimestamp(id)
		sec = ts.Sec
		return err
	})
	if err != nil {
		t.Fatalf("mirror snapshot on site %s: %v", p.name, err)
	}
	return sec
}

func mirrorScript(t *testing.T, cfg mirrorConfig, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cfg.Script, args...)
	// the script finds the sites where the running pair lives, whatever this process inherited
	cmd.Env = append(os.Environ(), "CEPH_MIRROR_A_DIR="+cfg.Sites[0].Dir, "CEPH_MIRROR_B_DIR="+cfg.Sites[1].Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cfg.Script, args, err, out)
	}
}

// TestMirrorFailover proves volume replication between the two sites of
// scripts/ceph-mirror.sh: a volume created on A through the controller, records written into
// it, replication enabled and synced; a planned migration to B (demote A, promote B) with the
// records read on B through A's volume ID resolved by B's cluster map; more records on B;
// failback to A with every record there; then a lost site A (its cluster and rbd-mirror
// stopped), a force promote on B with every record up to the last synced snapshot there, and
// A, back, demoted and resynced from B.
func TestMirrorFailover(t *testing.T) {
	cfg, a, b := mirrorSites(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	const size = 1 << 30
	params := map[string]string{"mirroringMode": "snapshot", "schedulingInterval": "1m"}

	cv, err := a.csi.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("mirror-%d", time.Now().UnixNano()),
		CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: mountCap,
		Parameters: map[string]string{"clusterID": a.cluster, "pool": cfg.Pool}, Secrets: a.secrets})
	if err != nil {
		t.Fatal(err)
	}
	vol := cv.GetVolume().GetVolumeId()
	t.Logf("volume %s (site A's cluster ID and pool ID)", vol)
	writers := map[int]string{}
	write := func(s *mirrorSite, from, to int) {
		t.Helper()
		if err := s.writeRecords(ctx, t, vol, from, to); err != nil {
			t.Fatalf("write records %d-%d on site %s: %v", from, to, s.name, err)
		}
		for i := from; i < to; i++ {
			writers[i] = s.name
		}
	}
	write(a, 0, 100)

	// a secondary that is not mirrored yet: B does not have the image
	if _, err := b.repl.PromoteVolume(ctx, &replpb.PromoteVolumeRequest{ReplicationSource: replSource(vol), Secrets: b.secrets}); status.Code(err) != codes.NotFound {
		t.Fatalf("PromoteVolume on B before replication: %v, want NotFound", err)
	}
	enable := &replpb.EnableVolumeReplicationRequest{ReplicationSource: replSource(vol), Parameters: params, Secrets: a.secrets}
	since := time.Now().Unix()
	for i := 0; i < 2; i++ { // idempotent
		if _, err := a.repl.EnableVolumeReplication(ctx, enable); err != nil {
			t.Fatalf("EnableVolumeReplication (call %d): %v", i+1, err)
		}
	}
	t.Logf("first sync (image created on B by rbd-mirror) after %v", a.waitSynced(ctx, t, vol, since).Round(time.Millisecond))

	// the floor: a mirror snapshot that carries no data
	t.Logf("MEASURED sync of an empty mirror snapshot: %v", a.waitSynced(ctx, t, vol, a.mirrorSnapshot(ctx, t, vol)).Round(time.Millisecond))
	// throughput: 256 MiB written after the first sync, then a mirror snapshot
	if err := a.onImage(ctx, t, vol, func(img *rbd.Image) error {
		chunk := bytes.Repeat([]byte{0xa5}, 4<<20)
		for off := int64(64 << 20); off < 64<<20+256<<20; off += int64(len(chunk)) {
			if _, err := img.WriteAt(chunk, off); err != nil {
				return err
			}
		}
		return img.Flush()
	}); err != nil {
		t.Fatal(err)
	}
	snapAt := a.mirrorSnapshot(ctx, t, vol)
	took := a.waitSynced(ctx, t, vol, snapAt)
	t.Logf("MEASURED sync of 256 MiB: %v (%.1f MiB/s)", took.Round(time.Millisecond), 256/took.Seconds())

	// a volume still published to a node is not demoted: its writers would get EROFS
	snw := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	if _, err := a.csi.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: "node-1", VolumeCapability: snw, Secrets: a.secrets}); err != nil {
		t.Fatalf("ControllerPublishVolume on A: %v", err)
	}
	if _, err := a.repl.DemoteVolume(ctx, &replpb.DemoteVolumeRequest{ReplicationSource: replSource(vol), Secrets: a.secrets}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("DemoteVolume of a published volume: %v, want FailedPrecondition", err)
	}
	// what node-1's plugin records at NodeStageVolume: its client addresses (not 127.0.0.1,
	// where site B's rbd-mirror watches the primary image from; a node recording none is
	// TestMirrorUnpublishPeerDaemon's)
	p, _, _, err := a.ctrl.openVolume(ctx, vol, a.secrets)
	if err != nil {
		t.Fatal(err)
	}
	_, err = attachment.Modify(ctx, p, mustVol(t, vol).UID, "test", func(st *attachment.State) error {
		st.Clients["node-1"] = attachment.Clients{Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, At: time.Now()}
		return nil
	})
	p.Conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.csi.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: "node-1", Secrets: a.secrets}); err != nil {
		t.Fatalf("ControllerUnpublishVolume on A: %v", err)
	}

	// planned migration: demote A, promote B
	demoteAt := time.Now()
	for i := 0; i < 2; i++ {
		if _, err := a.repl.DemoteVolume(ctx, &replpb.DemoteVolumeRequest{ReplicationSource: replSource(vol), Secrets: a.secrets}); err != nil {
			t.Fatalf("DemoteVolume on A (call %d): %v", i+1, err)
		}
	}
	if err := a.writeRecords(ctx, t, vol, 1000, 1001); err == nil {
		t.Fatal("a write on demoted site A succeeded")
	}
	d := b.promoteUntil(ctx, t, vol, false, params)
	t.Logf("MEASURED planned migration: promote call to writable image on B %v (demote call to writable %v)", d.Round(time.Millisecond), time.Since(demoteAt).Round(time.Millisecond))
	b.checkRecords(ctx, t, vol, 100, writers)
	// CSI operations on B through A's volume ID
	if _, err := b.csi.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: vol,
		CapacityRange: &csi.CapacityRange{RequiredBytes: size + 64<<20}, Secrets: b.secrets}); err != nil {
		t.Fatalf("ControllerExpandVolume on B with A's volume ID: %v", err)
	}
	// a snapshot of it on B, by B's VolumeSnapshotClass (B's cluster ID)
	snap, err := b.csi.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{SourceVolumeId: vol, Name: "snap-on-b-" + vol[len(vol)-16:],
		Parameters: map[string]string{"clusterID": b.cluster}, Secrets: b.secrets})
	if err != nil {
		t.Fatalf("CreateSnapshot on B of A's volume ID: %v", err)
	}
	if _, err := b.csi.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: b.secrets}); err != nil {
		t.Fatalf("DeleteSnapshot on B: %v", err)
	}
	write(b, 100, 200)
	if _, err := b.repl.GetVolumeReplicationInfo(ctx, &replpb.GetVolumeReplicationInfoRequest{ReplicationSource: replSource(vol), Secrets: b.secrets}); err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("GetVolumeReplicationInfo on the new primary B: %v", err)
	}
	if _, err := a.repl.GetVolumeReplicationInfo(ctx, &replpb.GetVolumeReplicationInfoRequest{ReplicationSource: replSource(vol), Secrets: a.secrets}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("GetVolumeReplicationInfo on secondary A: %v, want FailedPrecondition", err)
	}

	// failback: demote B, A catches up and is promoted
	if _, err := b.repl.DemoteVolume(ctx, &replpb.DemoteVolumeRequest{ReplicationSource: replSource(vol), Secrets: b.secrets}); err != nil {
		t.Fatalf("DemoteVolume on B: %v", err)
	}
	d = a.promoteUntil(ctx, t, vol, false, params)
	t.Logf("MEASURED failback: promote call to writable image on A %v", d.Round(time.Millisecond))
	a.checkRecords(ctx, t, vol, 200, writers)
	for {
		r, err := b.repl.ResyncVolume(ctx, &replpb.ResyncVolumeRequest{ReplicationSource: replSource(vol), Secrets: b.secrets})
		if err != nil {
			t.Fatalf("ResyncVolume on secondary B: %v", err)
		}
		if r.GetReady() {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}

	// lost site A: records up to a synced snapshot, then some that no snapshot carries
	write(a, 200, 300)
	rpo := a.mirrorSnapshot(ctx, t, vol)
	a.waitSynced(ctx, t, vol, rpo)
	write(a, 300, 320)
	lostAt := time.Now()
	mirrorScript(t, cfg, "stop-site", "a")
	t.Cleanup(func() { mirrorScript(t, cfg, "start-site", "a") })
	// A's rbd-mirror reports up in B's pool until its watch there times out (30 s): until
	// then a promote without force is UNAVAILABLE, then FAILED_PRECONDITION asks for the force
	for {
		_, err := b.repl.PromoteVolume(ctx, &replpb.PromoteVolumeRequest{ReplicationSource: replSource(vol), Secrets: b.secrets})
		if status.Code(err) == codes.FailedPrecondition {
			t.Logf("MEASURED site A lost to non-forced promote on B answering FailedPrecondition: %v", time.Since(lostAt).Round(time.Second))
			break
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			t.Fatalf("PromoteVolume on B without force while A is primary and lost: %v, want Unavailable then FailedPrecondition", err)
		}
		time.Sleep(time.Second)
	}
	d = b.promoteUntil(ctx, t, vol, true, params)
	t.Logf("MEASURED force promote: call to writable image on B %v; recovery point: last synced snapshot %v before site A was lost",
		d.Round(time.Millisecond), lostAt.Sub(time.Unix(rpo, 0)).Round(time.Second))
	b.checkRecords(ctx, t, vol, 300, writers)
	lostOnB := 0
	_ = b.onImage(ctx, t, vol, func(img *rbd.Image) error {
		buf := make([]byte, recordSize)
		for i := 300; i < 320; i++ {
			if _, err := img.ReadAt(buf, int64(i)*recordSize); err == nil && !bytes.Equal(buf, record(i, "a")) {
				lostOnB++
			}
		}
		return nil
	})
	t.Logf("records written on A after its last synced snapshot and not on B: %d of 20 (the snapshot interval's loss)", lostOnB)
	write(b, 320, 340)

	// A returns as a split brain (both primary): demote it, resync it from B
	mirrorScript(t, cfg, "start-site", "a")
	if _, err := a.repl.DemoteVolume(ctx, &replpb.DemoteVolumeRequest{ReplicationSource: replSource(vol), Secrets: a.secrets}); err != nil {
		t.Fatalf("DemoteVolume on returned site A: %v", err)
	}
	resyncAt := time.Now()
	for {
		r, err := a.repl.ResyncVolume(ctx, &replpb.ResyncVolumeRequest{ReplicationSource: replSource(vol), Secrets: a.secrets})
		if err != nil && status.Code(err) != codes.Aborted && status.Code(err) != codes.NotFound {
			t.Fatalf("ResyncVolume on A: %v", err)
		}
		if r.GetReady() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("A never resynced: %v", err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("MEASURED resync of A from B after the split brain: %v", time.Since(resyncAt).Round(time.Millisecond))
	// B's records 320-339 came after its force-promote snapshot: the next mirror snapshot
	// carries them to A
	b.waitSynced(ctx, t, vol, b.mirrorSnapshot(ctx, t, vol))
	for i := 300; i < 320; i++ {
		delete(writers, i)
	}
	// A holds B's copy now: records 0-299 and B's 320-339 (300-319 are B's content, unchecked)
	a.checkRecords(ctx, t, vol, 300, writers)
	if err := a.onImage(ctx, t, vol, func(img *rbd.Image) error {
		buf := make([]byte, recordSize)
		for i := 320; i < 340; i++ {
			if _, err := img.ReadAt(buf, int64(i)*recordSize); err != nil {
				return err
			}
			if !bytes.Equal(buf, record(i, "b")) {
				return fmt.Errorf("record %d on A after resync: %q", i, bytes.TrimRight(buf[:64], "\x00"))
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
