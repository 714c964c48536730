package inventory

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
	monorbd "github.com/monoceph/monoceph/internal/rbd"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
)

// site is the local cluster with an RBD controller working in a RADOS namespace of its own.
type site struct {
	cl    cephtest.Cluster
	ctrl  *monorbd.Controller
	pool  *ceph.Pool
	conn  *ceph.Conn
	io    *rados.IOContext
	ns    string
	place Place
}

func newSite(t *testing.T) *site {
	t.Helper()
	cl := cephtest.Env(t)
	store := cl.Clusters(t, "")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	conn, err := pool.Get(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	// a RADOS namespace of its own, emptied and removed afterwards
	ns, io := cephcsitest.RBDNamespace(t, cl, conn)
	var c v1.Cluster
	for _, x := range store.Map() {
		if x.ClusterID == cl.ID {
			c = x
		}
	}
	return &site{cl: cl, ctrl: monorbd.NewController(monorbd.Options{Clusters: store, Pool: pool, Locks: oplock.New(), ClusterName: "kube-a"}),
		pool: pool, conn: conn, io: io, ns: ns, place: Place{Cluster: c, Pool: cl.RBDPool, Namespace: ns}}
}

func (s *site) create(t *testing.T, name, pv string) string {
	t.Helper()
	resp, err := s.ctrl.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}},
		Parameters: map[string]string{"clusterID": s.cl.ID, "pool": s.cl.RBDPool, "radosNamespace": s.ns, owner.PVName: pv, owner.PVCName: "c-" + pv, owner.PVCNamespace: "apps"},
		Secrets:    s.cl.Secrets()})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetVolume().GetVolumeId()
}

func (s *site) scan(t *testing.T) ([]Object, func(string) bool) {
	t.Helper()
	objs, covers, err := Scan(context.Background(), []Place{s.place}, func(ctx context.Context, c v1.Cluster) (*ceph.Conn, error) {
		return s.pool.Get(ctx, c.MonHost(), s.cl.Admin)
	})
	if err != nil {
		t.Fatal(err)
	}
	return objs, covers
}

func summary(entries []Entry) string {
	var out []string
	for _, e := range entries {
		out = append(out, fmt.Sprintf("%s:%s:%s", e.State, e.PV, e.Owner[owner.PVName]))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestScanAndJoin: on the local cluster, a bound volume, an orphan (no PV), a dangling PV
// (image removed by hand), a journal entry without an image (a crash after the reservation),
// an image without a journal entry (a crash of another kind) and a trashed image are each
// named for what they are; --delete-orphans (with no grace) deletes exactly the orphan through
// the controller, and a second pass finds nothing more to delete.
func TestScanAndJoin(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	bound := s.create(t, "pv-bound", "pv-bound")
	orphan := s.create(t, "pv-orphan", "pv-orphan")
	dangling := s.create(t, "pv-dangling", "pv-dangling")
	loc := radosop.Location{Conn: s.conn, Pool: s.cl.RBDPool, Namespace: s.ns}
	if err := rbd.RemoveImage(s.io, rbdname.Image(mustUID(t, dangling))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := journal.Reserve(ctx, loc, journal.Volume, "pv-crashed", map[string]string{"size": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := rbd.CreateImage(s.io, rbdname.Image("zzzzunjournaled0"), 1<<20, rbd.NewRbdImageOptions()); err != nil {
		t.Fatal(err)
	}
	if err := rbd.CreateImage(s.io, rbdname.Image("zzzztrashed00000"), 1<<20, rbd.NewRbdImageOptions()); err != nil {
		t.Fatal(err)
	}
	img, err := rbd.OpenImage(s.io, rbdname.Image("zzzztrashed00000"), rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := img.Trash(0); err != nil {
		t.Fatal(err)
	}
	img.Close()
	pvs := []PV{{Name: "pv-bound", Handle: bound, Phase: "Bound", ClaimRef: "apps/c-pv-bound"},
		{Name: "pv-dangling", Handle: dangling, Phase: "Bound"},
		{Name: "pv-elsewhere", Handle: "rv1:other:1::" + strings.Repeat("a", 16), Phase: "Bound"}}

	objs, covers := s.scan(t)
	entries := Join(objs, pvs, covers)
	want := "bound:pv-bound:pv-bound dangling:pv-dangling: journal-only:: orphaned::pv-orphan trashed:: unjournaled::"
	if got := summary(entries); got != want {
		t.Fatalf("inventory\n got %s\nwant %s", got, want)
	}
	del := func(ctx context.Context, e Entry) error {
		_, err := s.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: e.Handle, Secrets: s.cl.Secrets()})
		return err
	}
	if d, err := DeleteOrphans(ctx, entries, time.Now(), time.Hour, "kube-a", false, del); err != nil || len(d) != 0 {
		t.Fatalf("within the grace period: deleted %v, %v", d, err)
	}
	// another Kubernetes cluster sees every volume of this one as orphaned: it deletes none
	if d, err := DeleteOrphans(ctx, entries, time.Now().Add(time.Hour), time.Hour, "kube-b", false, del); err != nil || len(d) != 0 {
		t.Fatalf("another cluster's --delete-orphans deleted %v, %v", d, err)
	}
	d, err := DeleteOrphans(ctx, entries, time.Now().Add(time.Hour), time.Hour, "kube-a", false, del)
	if err != nil || len(d) != 1 || d[0].Handle != orphan {
		t.Fatalf("deleted %v (%v), want only %s", d, err, orphan)
	}
	objs, covers = s.scan(t)
	entries = Join(objs, pvs, covers)
	if got, want := summary(entries), "bound:pv-bound:pv-bound dangling:pv-dangling: journal-only:: trashed:: unjournaled::"; got != want {
		t.Fatalf("after deleting\n got %s\nwant %s", got, want)
	}
	if d, _ := DeleteOrphans(ctx, entries, time.Now().Add(time.Hour), time.Hour, "kube-a", true, del); len(d) != 0 {
		t.Fatalf("second pass would delete %v", d)
	}
}

func mustUID(t *testing.T, id string) string {
	t.Helper()
	v, err := volid.ParseRBDVolume(id)
	if err != nil {
		t.Fatal(err)
	}
	return v.UID
}

// TestBackfillOwners: a volume made before ownership keys existed gains its PV's names, and a
// key ceph-csi (or an earlier create) wrote keeps its value; a second pass writes nothing.
func TestBackfillOwners(t *testing.T) {
	s := newSite(t)
	ctx := context.Background()
	id := s.create(t, "pv-old", "pv-old")
	image := rbdname.Image(mustUID(t, id))
	img, err := rbd.OpenImage(s.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{owner.PVName, owner.PVCNamespace, owner.ClusterName} {
		if err := img.RemoveMetadata(k); err != nil {
			t.Fatal(err)
		}
	}
	if err := img.SetMetadata(owner.PVCName, "named-by-ceph-csi"); err != nil {
		t.Fatal(err)
	}
	img.Close()
	pvs := []PV{{Name: "pv-old", Handle: id, Phase: "Bound", ClaimRef: "apps/data"}}
	connect := func(ctx context.Context, c v1.Cluster) (*ceph.Conn, error) {
		return s.pool.Get(ctx, c.MonHost(), s.cl.Admin)
	}
	clusters := map[string]v1.Cluster{s.cl.ID: s.place.Cluster}
	objs, covers := s.scan(t)
	done, err := Backfill(ctx, Join(objs, pvs, covers), clusters, connect, "kube-b", false)
	if err != nil || len(done) != 1 {
		t.Fatalf("backfilled %v, %v", done, err)
	}
	img, err = rbd.OpenImageReadOnly(s.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	for k, want := range map[string]string{owner.PVName: "pv-old", owner.PVCNamespace: "apps", owner.PVCName: "named-by-ceph-csi", owner.ClusterName: "kube-b"} {
		if got, err := img.GetMetadata(k); err != nil || got != want {
			t.Errorf("%s = %q (%v), want %q", k, got, err, want)
		}
	}
	objs, covers = s.scan(t)
	if done, err := Backfill(ctx, Join(objs, pvs, covers), clusters, connect, "kube-b", true); err != nil || len(done) != 0 {
		t.Fatalf("second pass would write %v, %v", done, err)
	}
}
