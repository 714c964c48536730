package cephfs

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/owner"
)

// TestOwnershipKeys: the names the sidecars pass, and the cluster name, land in the subvolume's
// and the snapshot's metadata in ceph-csi's keys (read back with the manager's own `metadata
// ls`), on a retry too; a manager without `fs subvolume metadata` still gets its volumes.
func TestOwnershipKeys(t *testing.T) {
	e := newEnv(t)
	e.ctrl.opts.ClusterName = "kube-a"
	ctx := context.Background()
	req := e.createReq("owned", 1<<20, rwx, nil, owner.PVName, "pvc-0001", owner.PVCName, "data", owner.PVCNamespace, "apps")
	e.create(t, req)
	vol := e.create(t, req) // a retry: same keys, nothing written twice
	sid, err := parseVolumeID(vol.GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	sub := subvolumeName(sid.Own.UID)
	want := owner.Keys{owner.PVName: "pvc-0001", owner.PVCName: "data", owner.PVCNamespace: "apps", owner.ClusterName: "kube-a"}
	if got := e.metadata(t, sub, ""); !maps.Equal(got, want) {
		t.Fatalf("subvolume metadata %v, want %v", got, want)
	}
	snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "owned-snap", SourceVolumeId: vol.GetVolumeId(), Secrets: e.cl.Secrets(),
		Parameters: map[string]string{owner.SnapshotName: "snap-1", owner.SnapshotNamespace: "apps", owner.SnapshotContentName: "snapcontent-1"}})
	if err != nil {
		t.Fatal(err)
	}
	ssid, err := parseSnapshotID(snap.GetSnapshot().GetSnapshotId())
	if err != nil {
		t.Fatal(err)
	}
	wantSnap := owner.Keys{owner.SnapshotName: "snap-1", owner.SnapshotNamespace: "apps", owner.SnapshotContentName: "snapcontent-1", owner.ClusterName: "kube-a"}
	if got := e.metadata(t, sub, snapName(ssid.Own.SnapUID)); !maps.Equal(got, wantSnap) {
		t.Fatalf("snapshot metadata %v, want %v", got, wantSnap)
	}

	// a manager before 16.2.11: no metadata commands in its table, volumes made without keys
	e.ctrl.mgr = oldMgr{cephMgr{}}
	e.ctrl.metadata = commandSupport{}
	old := e.create(t, e.createReq("unowned", 1<<20, rwx, nil, owner.PVName, "pvc-0002"))
	osid, _ := parseVolumeID(old.GetVolumeId())
	if got := e.metadata(t, subvolumeName(osid.Own.UID), ""); len(got) != 0 {
		t.Fatalf("metadata %v written although the manager lacks the command", got)
	}
}

// oldMgr hides the metadata commands from the command table, as a Pacific manager before
// 16.2.11 has none.
type oldMgr struct{ real mgrAPI }

func (m oldMgr) CommandTable(ctx context.Context, mgr *ceph.Conn) (ceph.CommandTable, error) {
	t, err := m.real.CommandTable(ctx, mgr)
	return slices.DeleteFunc(t, func(s ceph.CommandSignature) bool { return slices.Contains(s.Words, "metadata") }), err
}

func (m oldMgr) Command(ctx context.Context, mgr *ceph.Conn, cmd map[string]any) ([]byte, error) {
	return m.real.Command(ctx, mgr, cmd)
}

// metadata lists a subvolume's (or its snapshot's) metadata with the manager command itself.
func (e *env) metadata(t *testing.T, sub, snap string) owner.Keys {
	t.Helper()
	pool := ceph.NewPool(ceph.PoolOptions{})
	defer pool.Close()
	mgr, err := pool.GetForMgr(context.Background(), e.cl.Monitors, e.cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Release()
	cmd := map[string]any{"prefix": "fs subvolume metadata ls", "vol_name": e.cl.FSName, "sub_name": sub, "group_name": e.group}
	if snap != "" {
		cmd["prefix"], cmd["snap_name"] = "fs subvolume snapshot metadata ls", snap
	}
	out, err := ceph.MgrCommand(context.Background(), mgr, cmd)
	if err != nil {
		t.Fatal(err)
	}
	got := owner.Keys{}
	if len(out) > 0 {
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
	}
	return got
}
