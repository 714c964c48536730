// Package cephcsi tests the swap from ceph-csi to monoceph on a node: volumes ceph-csi's node
// plugin staged (with ceph-fuse, in its mount namespace) are unstaged, staged and published
// again by monoceph's node plugin running in the same mount namespace after ceph-csi's pod (and
// with it its FUSE daemons) went away.
package cephcsi

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/driver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// envNode makes the test binary run a monoceph driver instead of the tests: how a test starts
// monoceph's node plugin inside ceph-csi's mount namespace (a Go process cannot join another
// mount namespace once it runs threads, so the plugin is a process of its own, started there).
const envNode = "MONOCEPH_TEST_RUN_DRIVER"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(envNode); cfg != "" {
		os.Exit(runDriver(cfg))
	}
	os.Exit(m.Run())
}

// runDriver runs a driver from "type,mode,endpoint,drivername,nodeid,clustermap,statedir".
func runDriver(spec string) int {
	f := strings.Split(spec, ",")
	d, err := driver.New(driver.Config{Type: driver.Type(f[0]), Mode: driver.Mode(f[1]), Endpoint: f[2], DriverName: f[3], NodeID: f[4],
		ClusterConfig: f[5], StateDir: f[6], RBDMaxCloneDepth: 8, CephFSCloneWait: time.Minute,
		CephTimeouts: ceph.Timeouts{Connect: 10 * time.Second, Op: 30 * time.Second},
		ConnIdleTTL:  time.Minute, HealthTimeout: 5 * time.Second, ShutdownGrace: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

var (
	rwx = &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	rox = &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
)

// monocephIn starts a monoceph driver in ns (node mode needs the namespace's mounts) and
// returns a connection to it.
func monocephIn(t *testing.T, ns *cephcsitest.NS, typ, mode, name, clusterMap string) *grpc.ClientConn {
	t.Helper()
	sock := filepath.Join(ns.Dir, "mc-"+typ+"-"+mode+".sock")
	log, err := os.Create(filepath.Join(ns.Dir, "log", "monoceph-"+typ+"-"+mode+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := ns.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envNode+"="+strings.Join([]string{typ, mode, "unix://" + sock, name, "monoceph-node", clusterMap, filepath.Join(ns.Dir, "st")}, ","))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("monoceph %s %s log:\n%s", typ, mode, b)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("monoceph %s %s did not start", typ, mode)
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// sh runs a shell command in ns and returns its output.
func sh(t *testing.T, ns *cephcsitest.NS, script string) (string, error) {
	t.Helper()
	out, err := ns.Command("sh", "-c", script).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCephFSNodeTakeover: ceph-csi stages and publishes a volume and a shallow volume with
// ceph-fuse and data is written; its pod goes away (process and FUSE daemons killed, the mounts
// left dead, as on a node where the plugin's container stopped); monoceph's node plugin then
// unpublishes and unstages the dead mounts (a node drained after the swap), stages over a dead
// staging mount directly, and serves both volumes again with their data; ceph-csi's shallow
// volume's snapshot comes from ceph-csi's journal.
func TestCephFSNodeTakeover(t *testing.T) {
	cl := cephtest.Env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	mgr, err := pool.GetForMgr(ctx, cl.Monitors, cl.Admin)
	must(t, err)
	t.Cleanup(mgr.Release)
	fsa := admin.NewFromConn(mgr.Rados())
	group := fmt.Sprintf("cc%d", time.Now().UnixNano()%1e9)
	must(t, fsa.CreateSubVolumeGroup(cl.FSName, group, nil))
	extra := fmt.Sprintf(`"cephFS":{"subvolumeGroup":%q,"radosNamespace":%q}`, group, group)
	ns := cephcsitest.NewNS(t, cl, extra)
	clusterMap, _ := cephcsitest.ClusterMap(t, cl, extra, ns.Dir)
	secrets := map[string]string{"adminID": cl.Admin.ID, "adminKey": cl.Admin.Key()}

	// ceph-csi: a volume with data, a snapshot, a shallow volume, both staged and published
	d := ns.Start(t, cephcsitest.Options{Type: "cephfs", Controller: true, Node: true})
	cc, cn := csi.NewControllerClient(d.Conn), csi.NewNodeClient(d.Conn)
	params := map[string]string{"clusterID": cephcsitest.ClusterID, "fsName": cl.FSName, "mounter": "fuse"}
	vol, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-node-a", CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{rwx}, Parameters: params, Secrets: secrets})
	must(t, err)
	a := vol.GetVolume()
	paths := func(name string) (string, string) {
		return filepath.Join(ns.Dir, "staging", name), filepath.Join(ns.Dir, "target", name)
	}
	aStage, aTarget := paths("a")
	stage := func(node csi.NodeClient, v *csi.Volume, c *csi.VolumeCapability, stp, target string) {
		t.Helper()
		_, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: stp, VolumeCapability: c,
			VolumeContext: v.GetVolumeContext(), Secrets: secrets})
		must(t, err)
		_, err = node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: stp, TargetPath: target,
			VolumeCapability: c, Readonly: c == rox, VolumeContext: v.GetVolumeContext(), Secrets: secrets})
		must(t, err)
	}
	must(t, os.MkdirAll(aStage, 0o750))
	stage(cn, a, rwx, aStage, aTarget)
	if out, err := sh(t, ns, "printf first > "+aTarget+"/one && cat "+aTarget+"/one"); err != nil || out != "first" {
		t.Fatalf("writing through ceph-csi's mount: %q, %v", out, err)
	}
	snap, err := cc.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-node", SourceVolumeId: a.GetVolumeId(),
		Parameters: map[string]string{"clusterID": cephcsitest.ClusterID}, Secrets: secrets})
	must(t, err)
	shv, err := cc.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-node-sh", CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{rox}, Parameters: params, Secrets: secrets,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}})
	must(t, err)
	sh1 := shv.GetVolume()
	shStage, shTarget := paths("sh")
	must(t, os.MkdirAll(shStage, 0o750))
	stage(cn, sh1, rox, shStage, shTarget)
	if out, err := sh(t, ns, "cat "+shTarget+"/one"); err != nil || out != "first" {
		t.Fatalf("reading ceph-csi's shallow volume: %q, %v", out, err)
	}

	// the swap: ceph-csi's pod goes, and its FUSE daemons with it
	d.Stop()
	ns.KillAll()
	if out, err := sh(t, ns, "cat "+aTarget+"/one"); err == nil || !strings.Contains(out, "not connected") {
		t.Fatalf("ceph-csi's mount still answers after its daemons died: %q, %v", out, err)
	}

	mn := csi.NewNodeClient(monocephIn(t, ns, "cephfs", "node", cephcsitest.CephFSDriverName, clusterMap))
	// a drained node: the kubelet unpublishes and unstages what ceph-csi set up
	_, err = mn.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: a.GetVolumeId(), TargetPath: aTarget})
	must(t, err)
	_, err = mn.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: a.GetVolumeId(), StagingTargetPath: aStage})
	must(t, err)
	if left := ns.Mounts(aStage); len(left) > 0 {
		t.Fatalf("mounts left after monoceph unstaged ceph-csi's staging: %v", left)
	}
	stage(mn, a, rwx, aStage, aTarget)
	if out, err := sh(t, ns, "cat "+aTarget+"/one && printf second > "+aTarget+"/two"); err != nil || out != "first" {
		t.Fatalf("ceph-csi's volume through monoceph's mount: %q, %v", out, err)
	}
	// the shallow volume: unpublished, then staged again right over ceph-csi's dead staging
	// mounts (the FUSE mount and the bind of the snapshot stacked on it)
	_, err = mn.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: sh1.GetVolumeId(), TargetPath: shTarget})
	must(t, err)
	stage(mn, sh1, rox, shStage, shTarget)
	if out, err := sh(t, ns, "ls "+shTarget); err != nil || out != "one" {
		t.Fatalf("ceph-csi's shallow volume through monoceph: %q, %v (want the snapshot's content only)", out, err)
	}
	if out, err := sh(t, ns, "touch "+shTarget+"/three"); err == nil || !strings.Contains(out, "Read-only") {
		t.Fatalf("writing to the shallow volume: %q, %v", out, err)
	}
	for _, v := range []struct {
		id, stage, target string
	}{{a.GetVolumeId(), aStage, aTarget}, {sh1.GetVolumeId(), shStage, shTarget}} {
		_, err = mn.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target})
		must(t, err)
		_, err = mn.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.stage})
		must(t, err)
	}
	if left := ns.Mounts(ns.Dir); len(left) > 0 {
		t.Errorf("mounts left: %v", left)
	}

	// monoceph's controller deletes what ceph-csi made; nothing of either driver is left
	mc := csi.NewControllerClient(monocephIn(t, ns, "cephfs", "controller", cephcsitest.CephFSDriverName, clusterMap))
	_, err = mc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: sh1.GetVolumeId(), Secrets: secrets})
	must(t, err)
	_, err = mc.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: secrets})
	must(t, err)
	_, err = mc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a.GetVolumeId(), Secrets: secrets})
	must(t, err)
	if subs, err := fsa.ListSubVolumes(cl.FSName, group); err != nil || len(subs) != 0 {
		t.Errorf("subvolumes left: %v, %v", subs, err)
	}
	conn, err := pool.Get(ctx, cl.Monitors, cl.Admin)
	must(t, err)
	defer conn.Release()
	io, err := conn.Rados().OpenIOContext("cephfs." + cl.FSName + ".meta")
	must(t, err)
	defer io.Destroy()
	io.SetNamespace(group)
	left, err := cephtest.ObjectsWithPrefix(io, "")
	must(t, err)
	if len(left) != 0 {
		t.Errorf("objects left in the journal namespace: %v", left)
	}
	must(t, fsa.RemoveSubVolumeGroup(cl.FSName, group))
}
