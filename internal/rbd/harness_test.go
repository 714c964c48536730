package rbd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/volid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// env is a controller on the local cluster behind the real gRPC plumbing, plus an admin
// connection to check Ceph's state directly.
type env struct {
	cl     cephtest.Cluster
	client csi.ControllerClient
	group  csi.GroupControllerClient
	ctrl   *Controller
	conn   *ceph.Conn
	io     *rados.IOContext
	ns     string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvIn(t, "")
}

// newEnvIn works in namespace ns, or in a new namespace of its own (removed afterwards) when ns
// is empty.
func newEnvIn(t testing.TB, ns string) *env {
	t.Helper()
	cl := cephtest.Env(t)
	dir := t.TempDir()
	store := cl.Clusters(t, "")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	ctrl := NewController(Options{Clusters: store, Pool: pool, Locks: oplock.New(), MaxCloneDepth: 2})
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
	io, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	owned := ns == ""
	if owned {
		// each test works in a RADOS namespace of its own, so leak checks see only its objects
		ns = fmt.Sprintf("t%d", time.Now().UnixNano()%1e12)
		if err := rbd.NamespaceCreate(io, ns); err != nil {
			t.Fatal(err)
		}
	}
	io.SetNamespace(ns)
	e := &env{cl: cl, client: csi.NewControllerClient(cc), group: csi.NewGroupControllerClient(cc), ctrl: ctrl, conn: conn, io: io, ns: ns}
	if owned {
		t.Cleanup(func() { e.purge(t) })
	} else {
		t.Cleanup(io.Destroy)
	}
	return e
}

// purge removes everything left in the test's namespace, then the namespace.
func (e *env) purge(t testing.TB) {
	groups, _ := rbd.GroupList(e.io)
	for _, g := range groups {
		_ = rbd.GroupRemove(e.io, g)
	}
	names, _ := rbd.GetImageNames(e.io)
	for _, n := range names {
		if img, err := rbd.OpenImage(e.io, n, rbd.NoSnapshot); err == nil {
			snaps, _ := img.GetSnapshotNames()
			for _, s := range snaps {
				_ = img.GetSnapshot(s.Name).Remove()
			}
			img.Close()
		}
		_ = rbd.RemoveImage(e.io, n)
	}
	trash, _ := rbd.GetTrashList(e.io)
	for _, tr := range trash {
		_ = rbd.TrashRemove(e.io, tr.Id, true)
	}
	_ = e.io.ListObjects(func(oid string) { _ = e.io.Delete(oid) })
	root, err := e.conn.Rados().OpenIOContext(e.cl.RBDPool)
	if err == nil {
		_ = rbd.NamespaceRemove(root, e.ns)
		root.Destroy()
	}
	e.io.Destroy()
}

func (e *env) params(extra ...string) map[string]string {
	p := map[string]string{"clusterID": e.cl.ID, "pool": e.cl.RBDPool, "radosNamespace": e.ns}
	for i := 0; i+1 < len(extra); i += 2 {
		p[extra[i]] = extra[i+1]
	}
	return p
}

var mountCap = []*csi.VolumeCapability{{
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
}}

func (e *env) createReq(name string, size int64, src *csi.VolumeContentSource) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeCapabilities: mountCap, Parameters: e.params(), Secrets: e.cl.Secrets(), VolumeContentSource: src}
}

// images lists the test namespace's images (not the trash).
func (e *env) images(t *testing.T) []string {
	names, err := rbd.GetImageNames(e.io)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// journalKeys counts the omap keys of every journal shard in the test namespace.
func (e *env) journalKeys(t *testing.T) int {
	n := 0
	err := e.io.ListObjects(func(oid string) {
		if !strings.HasPrefix(oid, "monoceph.") {
			return // librbd's own objects (rbd_directory, rbd_trash) are checked through its API
		}
		vals, err := e.io.GetAllOmapValues(oid, "", "", 1000)
		if err != nil {
			t.Errorf("omap of %s: %v", oid, err)
		}
		n += len(vals)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// assertEmpty checks that nothing of the driver is left in the namespace: no image, stub, trash
// entry (also of a removal in progress), journal key or journal object.
func (e *env) assertEmpty(t *testing.T) {
	t.Helper()
	// Data objects of a removed image that had snapshots stay listed until the OSD's snapshot
	// trimmer, which runs in the background, has removed their clones: seen once on a loaded
	// Tentacle cluster (TestGroupSnapshotLifecycle, one rbd_data object). What is still there
	// after Settled's wait is left behind.
	var err error
	left := cephtest.Settled(func() []string {
		var l []string
		if l, err = cephtest.RBDLeftovers(e.io); err != nil {
			return nil
		}
		return l
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left in namespace %s: %v", e.ns, left)
	}
}

func (e *env) write(t *testing.T, image string, off int64, data []byte) {
	t.Helper()
	img, err := rbd.OpenImage(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if _, err := img.WriteAt(data, off); err != nil {
		t.Fatal(err)
	}
}

// hasParent says whether image is a clone.
func (e *env) hasParent(t *testing.T, image string) bool {
	t.Helper()
	img, err := rbd.OpenImageReadOnly(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	_, err = img.GetParent()
	if err != nil && !errors.Is(err, rbd.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func (e *env) read(t *testing.T, image string, off int64, n int) []byte {
	t.Helper()
	img, err := rbd.OpenImageReadOnly(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	buf := make([]byte, n)
	if _, err := img.ReadAt(buf, off); err != nil {
		t.Fatal(err)
	}
	return buf
}

func mustVol(t *testing.T, id string) volid.RBDVolume {
	v, err := volid.ParseRBDVolume(id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// assertOnly checks that exactly the images named remain, with their user snapshots only the
// CSI ones, and that the journal holds exactly keys entries.
func (e *env) assertOnly(t *testing.T, images []string, keys int) {
	t.Helper()
	got := e.images(t)
	if strings.Join(got, ",") != strings.Join(images, ",") {
		t.Errorf("images = %v, want %v", got, images)
	}
	for _, name := range got {
		img, err := rbd.OpenImageReadOnly(e.io, name, rbd.NoSnapshot)
		if err != nil {
			t.Fatal(err)
		}
		snaps, _ := img.GetSnapshotNames()
		img.Close()
		for _, s := range snaps {
			if strings.HasPrefix(s.Name, rbdname.ClonePrefix) {
				t.Errorf("transient snapshot %s@%s left", name, s.Name)
			}
		}
	}
	if tr, _ := rbd.GetTrashList(e.io); len(tr) != 0 {
		t.Errorf("trash entries left: %+v", tr)
	}
	if n := e.journalKeys(t); n != keys {
		t.Errorf("%d journal keys, want %d", n, keys)
	}
}
