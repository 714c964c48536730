package cephfs

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/ceph/go-ceph/rados"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const mib = 1 << 20

// env is a CephFS controller on the local cluster behind the real gRPC plumbing, working in a
// subvolume group and journal namespace of its own.
type env struct {
	cl     cephtest.Cluster
	client csi.ControllerClient
	gsc    csi.GroupControllerClient
	ctrl   *Controller
	conn   *ceph.Conn
	fsa    *admin.FSAdmin
	group  string // subvolume group and journal namespace
	io     *rados.IOContext
}

func newEnv(t testing.TB) *env { return newEnvIn(t, "") }

// newEnvIn works in group (and namespace) tag, or in a fresh one removed afterwards.
func newEnvIn(t testing.TB, tag string) *env {
	t.Helper()
	cl := cephtest.Env(t)
	owned := tag == ""
	if owned {
		tag = fmt.Sprintf("t%d", time.Now().UnixNano()%1e12)
	}
	dir := t.TempDir()
	store := cl.Clusters(t, fmt.Sprintf(`"cephFS":{"subvolumeGroup":%q,"radosNamespace":%q}`, tag, tag))
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	ctrl := NewController(Options{Clusters: store, Pool: pool, Locks: oplock.New()})
	g, err := server.NewGRPC("unix://"+filepath.Join(dir, "csi.sock"), server.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	csi.RegisterControllerServer(g.Server, ctrl)
	csi.RegisterGroupControllerServer(g.Server, ctrl.Group())
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { g.Shutdown(5 * time.Second) })
	cc, err := grpc.NewClient("unix://"+g.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	conn, err := pool.Get(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	mgr, err := pool.GetForMgr(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Release)
	io, err := conn.Rados().OpenIOContext("cephfs." + cl.FSName + ".meta")
	if err != nil {
		t.Fatal(err)
	}
	io.SetNamespace(tag)
	e := &env{cl: cl, client: csi.NewControllerClient(cc), gsc: csi.NewGroupControllerClient(cc), ctrl: ctrl, conn: conn, fsa: admin.NewFromConn(mgr.Rados()), group: tag, io: io}
	if owned {
		t.Cleanup(func() { e.purge() })
	} else {
		t.Cleanup(io.Destroy)
	}
	return e
}

// purge removes every subvolume and snapshot of the group, the group and the namespace's objects.
func (e *env) purge() {
	subs, _ := e.fsa.ListSubVolumes(e.cl.FSName, e.group)
	for _, s := range subs {
		snaps, _ := e.fsa.ListSubVolumeSnapshots(e.cl.FSName, e.group, s)
		for _, sn := range snaps {
			_ = e.fsa.ForceRemoveSubVolumeSnapshot(e.cl.FSName, e.group, s, sn)
		}
		_ = e.fsa.ForceRemoveSubVolume(e.cl.FSName, e.group, s)
	}
	_ = e.fsa.ForceRemoveSubVolumeGroup(e.cl.FSName, e.group)
	_ = e.io.ListObjects(func(oid string) { _ = e.io.Delete(oid) })
	e.io.Destroy()
}

func (e *env) params(extra ...string) map[string]string {
	p := map[string]string{"clusterID": e.cl.ID, "fsName": e.cl.FSName}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

func capOf(m csi.VolumeCapability_AccessMode_Mode) []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}
}

var (
	rwx = capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	rox = capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
)

func (e *env) createReq(name string, size int64, caps []*csi.VolumeCapability, src *csi.VolumeContentSource, extra ...string) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: caps,
		Parameters: e.params(extra...), Secrets: e.cl.Secrets(), VolumeContentSource: src}
}

func snapSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func volSource(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

// create retries while a clone copies (ABORTED), as a CO does.
func (e *env) create(t testing.TB, req *csi.CreateVolumeRequest) *csi.Volume {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		resp, err := e.client.CreateVolume(ctx, req)
		if err == nil {
			return resp.GetVolume()
		}
		if !strings.Contains(err.Error(), "Aborted") || ctx.Err() != nil {
			t.Fatalf("CreateVolume(%s): %v", req.GetName(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) subvolumes(t testing.TB) []string {
	subs, err := e.fsa.ListSubVolumes(e.cl.FSName, e.group)
	if err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
	return subs
}

// objects lists the driver's objects (journal shards with keys, trackers) in the namespace.
func (e *env) objects(t testing.TB) []string {
	var out []string
	err := e.io.ListObjects(func(oid string) {
		vals, _ := e.io.GetAllOmapValues(oid, "", "", 1000)
		if strings.HasPrefix(oid, "monoceph.journal.") && len(vals) == 0 {
			return // an empty shard holds nothing
		}
		out = append(out, fmt.Sprintf("%s(%d keys)", oid, len(vals)))
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// assertEmpty checks that no subvolume (including ones kept for retained snapshots), journal
// key or tracker is left.
func (e *env) assertEmpty(t testing.TB) {
	t.Helper()
	if subs := cephtest.Settled(func() []string { return e.subvolumes(t) }); len(subs) != 0 {
		t.Errorf("subvolumes left: %v", subs)
	}
	if objs := e.objects(t); len(objs) != 0 {
		t.Errorf("objects left: %v", objs)
	}
}

func (e *env) loc() journal.Location {
	return journal.Location{Conn: e.conn, Pool: "cephfs." + e.cl.FSName + ".meta", Namespace: e.group}
}

// mountRoot mounts the whole filesystem with ceph-fuse for data checks.
func mountRoot(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("ceph-fuse", "--id", "admin", "--client_fs", cephtest.Env(t).FSName, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ceph-fuse: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}
