// Package shallow tests CephFS shallow read-only volumes end to end through the driver's
// controller and node services, with real ceph-fuse mounts.
package shallow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/e2e/localdriver"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/driver"
)

func capOf(m csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: m},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
}

var (
	rwx = capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER)
	rox = capOf(csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY)
)

type e2e struct {
	t      *testing.T
	ctx    context.Context
	d      *localdriver.Driver
	ctrl   csi.ControllerClient
	node   csi.NodeClient
	params map[string]string
}

func (e *e2e) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// mount stages and publishes v at fresh paths and returns the target path and a cleanup.
func (e *e2e) mount(v *csi.Volume, c *csi.VolumeCapability, name string) (string, func()) {
	e.t.Helper()
	staging, target := filepath.Join(e.d.Dir, name+"-staging"), filepath.Join(e.d.Dir, name+"-target")
	e.must(os.MkdirAll(staging, 0o750))
	_, err := e.node.NodeStageVolume(e.ctx, &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging,
		VolumeCapability: c, Secrets: e.d.Cluster.Secrets(), VolumeContext: v.GetVolumeContext()})
	e.must(err)
	_, err = e.node.NodePublishVolume(e.ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: c, Readonly: c == rox, VolumeContext: v.GetVolumeContext(), Secrets: e.d.Cluster.Secrets()})
	e.must(err)
	return target, func() {
		_, err := e.node.NodeUnpublishVolume(e.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target})
		e.must(err)
		_, err = e.node.NodeUnstageVolume(e.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging})
		e.must(err)
	}
}

func read(dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// TestShallowVolumeEndToEnd: write files, snapshot, create a shallow volume, stage and publish
// it with ceph-fuse, read the snapshot's content (and not later writes), fail to write (EROFS);
// delete the source subvolume (snapshot retained) and the shallow volume still reads, also after
// it is staged again; the snapshot goes with the last reference.
func TestShallowVolumeEndToEnd(t *testing.T) {
	group := fmt.Sprintf("e2e-%d", time.Now().UnixNano()%1e9)
	d := localdriver.Start(t, driver.TypeCephFS, fmt.Sprintf(`"cephFS":{"subvolumeGroup":%q,"radosNamespace":%q}`, group, group))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	e := &e2e{t: t, ctx: ctx, d: d, ctrl: csi.NewControllerClient(d.Conn), node: csi.NewNodeClient(d.Conn),
		params: map[string]string{"clusterID": d.Cluster.ID, "fsName": d.Cluster.FSName, "mounter": "fuse"}}

	src, err := e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "src", CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{rwx}, Parameters: e.params, Secrets: d.Cluster.Secrets()})
	e.must(err)
	srcDir, unmountSrc := e.mount(src.GetVolume(), rwx, "src")
	e.must(os.WriteFile(filepath.Join(srcDir, "hello.txt"), []byte("from the snapshot"), 0o644))
	snap, err := e.ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap", SourceVolumeId: src.GetVolume().GetVolumeId(), Secrets: d.Cluster.Secrets()})
	e.must(err)
	e.must(os.WriteFile(filepath.Join(srcDir, "later.txt"), []byte("after the snapshot"), 0o644))

	sh, err := e.ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "shallow", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{rox}, Parameters: e.params, Secrets: d.Cluster.Secrets(),
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}})
	e.must(err)
	if sh.GetVolume().GetVolumeContext()["shallow"] != "true" || sh.GetVolume().GetCapacityBytes() != 0 {
		t.Fatalf("not a shallow volume: %+v", sh.GetVolume())
	}
	shDir, unmountShallow := e.mount(sh.GetVolume(), rox, "shallow")
	if got := read(shDir, "hello.txt"); got != "from the snapshot" {
		t.Fatalf("shallow volume hello.txt = %q", got)
	}
	if got := read(shDir, "later.txt"); got[0] != '<' {
		t.Fatalf("shallow volume shows a file written after the snapshot: %q", got)
	}
	if err := os.WriteFile(filepath.Join(shDir, "new.txt"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Fatalf("write to a shallow volume: %v, want EROFS", err)
	}
	stats, err := e.node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: sh.GetVolume().GetVolumeId(), VolumePath: shDir})
	e.must(err)
	for _, u := range stats.GetUsage() {
		if u.GetUnit() == csi.VolumeUsage_BYTES && u.GetAvailable() != 0 {
			t.Fatalf("shallow volume reports %d bytes available, want 0", u.GetAvailable())
		}
	}

	// the source goes (its snapshot is retained), the shallow volume keeps reading
	unmountSrc()
	_, err = e.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: src.GetVolume().GetVolumeId(), Secrets: d.Cluster.Secrets()})
	e.must(err)
	if got := read(shDir, "hello.txt"); got != "from the snapshot" {
		t.Fatalf("after the source was deleted: %q", got)
	}
	unmountShallow()
	shDir, unmountShallow = e.mount(sh.GetVolume(), rox, "shallow-again")
	if got := read(shDir, "hello.txt"); got != "from the snapshot" {
		t.Fatalf("staged again after the source was deleted: %q", got)
	}
	unmountShallow()

	// DeleteSnapshot succeeds while the shallow volume references it; the last reference
	// removes it, and with it the retained subvolume
	_, err = e.ctrl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: d.Cluster.Secrets()})
	e.must(err)
	_, err = e.ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: sh.GetVolume().GetVolumeId(), Secrets: d.Cluster.Secrets()})
	e.must(err)

	p := ceph.NewPool(ceph.PoolOptions{})
	defer p.Close()
	mgr, err := p.GetForMgr(ctx, d.Cluster.Monitors, d.Cluster.Admin)
	e.must(err)
	defer mgr.Release()
	fsa := admin.NewFromConn(mgr.Rados())
	if subs := cephtest.Settled(func() []string {
		subs, err := fsa.ListSubVolumes(d.Cluster.FSName, group)
		e.must(err)
		return subs
	}); len(subs) != 0 {
		t.Fatalf("subvolumes left: %v", subs)
	}
	e.must(fsa.RemoveSubVolumeGroup(d.Cluster.FSName, group))
}
