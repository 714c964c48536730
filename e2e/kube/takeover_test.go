package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ceph-csi as its two Helm charts install it: releases and namespaces ceph-csi-rbd and
// ceph-csi-cephfs, Secrets and classes of the names its examples use.
const (
	csiRBDNS        = "ceph-csi-rbd"
	csiFSNS         = "ceph-csi-cephfs"
	csiRBDDriver    = cephcsitest.RBDDriverName
	csiFSDriver     = cephcsitest.CephFSDriverName
	csiRBDClass     = "csi-rbd-sc"
	csiFSClass      = "csi-cephfs-sc"
	csiRBDSnapClass = "csi-rbdplugin-snapclass"
	csiFSSnapClass  = "csi-cephfsplugin-snapclass"
	csiRBDSecret    = "csi-rbd-secret"
	csiFSSecret     = "csi-cephfs-secret"
)

// takeover is what the steps of the ceph-csi takeover share.
type takeover struct {
	ns       *cephcsitest.NS
	drivers  []*cephcsitest.Driver
	pvs      map[string]*corev1.PersistentVolume
	snaps    map[string]*snapv1.VolumeSnapshot
	patterns map[int64][]byte // what was written into PVC rbd-a before the swap, by offset
	fsRoot   string           // ceph-fuse mount of the whole filesystem, for data checks
	config   string           // ceph-csi's config.json
	pool     *ceph.Pool
}

// TestCephCSITakeoverEndToEnd: ceph-csi (its own binary, with the real provisioner and
// snapshotter) provisions volumes and snapshots of its classes, data is written; ceph-csi goes,
// monoceph is installed under its names with the README's commands and serves every operation
// on ceph-csi's volumes through Kubernetes; the README's way back runs and ceph-csi serves
// again, restoring a volume from a snapshot monoceph made; nothing of either is left.
func TestCephCSITakeoverEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.installCluster()
	for _, ns := range []string{userNS, csiRBDNS, csiFSNS, "backup"} {
		if _, err := e.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tk := &takeover{pvs: map[string]*corev1.PersistentVolume{}, snaps: map[string]*snapv1.VolumeSnapshot{}, patterns: map[int64][]byte{}}
	// a failed step may leave either driver stopped: what the test made goes straight from Ceph
	t.Cleanup(func() {
		if t.Failed() {
			e.purgeCephCSIObjects()
		}
	})
	steps := []struct {
		name string
		run  func(*env, *takeover)
	}{
		{"ceph-csi provisions volumes and snapshots with data", (*env).stepCephCSIProvisions},
		{"ceph-csi goes and monoceph is installed under its names (README)", (*env).stepSwapToMonoceph},
		{"changed blocks between two of ceph-csi's VolumeSnapshots", (*env).stepCephCSIChangedBlocks},
		{"monoceph serves ceph-csi's RBD volumes and snapshots", (*env).stepTakenOverRBD},
		{"monoceph serves ceph-csi's CephFS volumes and snapshots and shallow volumes", (*env).stepTakenOverCephFS},
		{"NetworkFence under ceph-csi's driver name and Secret", func(e *env, _ *takeover) {
			e.fenceWith(csiRBDDriver, csiRBDNS, csiRBDSecret, cephcsitest.ClusterID)
		}},
		{"no component was refused by RBAC", func(e *env, _ *takeover) { e.stepNoDenials() }},
		{"the way back: ceph-csi again (README)", (*env).stepBackToCephCSI},
		{"nothing of either driver is left in Ceph", (*env).stepNothingLeft},
	}
	for _, s := range steps {
		start := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			sub := *e
			sub.t = t
			s.run(&sub, tk)
		})
		t.Logf("%s: %v (%.1f s)", s.name, map[bool]string{true: "ok", false: "FAILED"}[ok], time.Since(start).Seconds())
		if !ok {
			t.FailNow()
		}
	}
}

// startCephCSI runs ceph-csi's controllers with their provisioner and snapshotter (as pod
// "ceph-csi" of the runner) and creates its CSIDriver objects, as ceph-csi's charts do.
func (e *env) startCephCSI(tk *takeover) {
	e.t.Helper()
	ctx := context.Background()
	tk.drivers = nil
	for _, typ := range []string{"rbd", "cephfs"} {
		d := tk.ns.Start(e.runner.t, cephcsitest.Options{Type: typ, Controller: true})
		tk.drivers = append(tk.drivers, d)
		sidecars := []string{"provisioner", "snapshotter"}
		if typ == "rbd" {
			// as in ceph-csi's RBD provisioner pod: rbd.csi.ceph.com requires attachment. Without
			// ControllerPublishVolume in ceph-csi, its attacher marks attachments attached and
			// never touches PV finalizers: the README's way back lifts those monoceph's put
			sidecars = append(sidecars, "attacher")
		}
		for _, sc := range sidecars {
			args := []string{"--csi-address=" + d.Socket, "--kubeconfig=" + e.adminKC, "--leader-election=false", "--timeout=150s", "--v=2"}
			switch sc {
			case "provisioner":
				// ceph-csi's RBD plugin reports topology; its charts run without the feature
				args = append(args, "--extra-create-metadata", "--feature-gates=Topology=false")
			case "snapshotter":
				args = append(args, "--extra-create-metadata")
			}
			e.runner.start(e.runner.t, "ceph-csi", "ceph-csi-"+typ+"/"+sc, filepath.Join(e.bin, "csi-"+sc), args, nil, "")
		}
	}
	yes, no := true, false
	file := storagev1.FSGroupPolicy("File")
	for name, attach := range map[string]bool{csiRBDDriver: true, csiFSDriver: false} {
		_, err := e.kc.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.CSIDriverSpec{AttachRequired: &attach, PodInfoOnMount: &no, FSGroupPolicy: &file, SELinuxMount: &yes}}, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// stopCephCSI stands in for `helm uninstall` of ceph-csi's charts: its processes go, and the
// CSIDriver objects the charts own.
func (e *env) stopCephCSI(tk *takeover) {
	e.t.Helper()
	e.runner.stopPod("ceph-csi")
	for _, d := range tk.drivers {
		d.Stop()
	}
	for _, name := range []string{csiRBDDriver, csiFSDriver} {
		if err := e.kc.StorageV1().CSIDrivers().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) stepCephCSIProvisions(tk *takeover) {
	ctx := context.Background()
	// ceph-csi 3.12 does not create its subvolume group
	if _, err := e.cephCmd("ceph", "fs", "subvolumegroup", "create", e.ceph.FSName, "csi"); err != nil {
		e.t.Fatal(err)
	}
	tk.config = cephcsitest.ConfigJSON(e.ceph, `"cephFS":{"subvolumeGroup":"csi"}`)
	tk.ns = cephcsitest.NewNSFor(e.runner.t, tk.config)
	// what ceph-csi's charts and its users leave in the cluster: the config ConfigMap, Secrets
	// (RBD: userID/userKey; CephFS: adminID/adminKey), classes naming them
	for _, ns := range []string{csiRBDNS, csiFSNS} {
		if _, err := e.kc.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ceph-csi-config"},
			Data: map[string]string{"config.json": tk.config}}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	secrets := map[string]map[string]string{
		csiRBDSecret: {"userID": e.ceph.Admin.ID, "userKey": e.ceph.Admin.Key()},
		csiFSSecret:  {"adminID": e.ceph.Admin.ID, "adminKey": e.ceph.Admin.Key()},
	}
	for name, ns := range map[string]string{csiRBDSecret: csiRBDNS, csiFSSecret: csiFSNS} {
		if _, err := e.kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: secrets[name]}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	secretParams := func(name, ns string) map[string]string {
		p := map[string]string{}
		for _, k := range []string{"provisioner", "controller-expand", "node-stage"} {
			p["csi.storage.k8s.io/"+k+"-secret-name"], p["csi.storage.k8s.io/"+k+"-secret-namespace"] = name, ns
		}
		return p
	}
	rbdParams := secretParams(csiRBDSecret, csiRBDNS)
	for k, v := range map[string]string{"clusterID": cephcsitest.ClusterID, "pool": e.ceph.RBDPool, "imageFeatures": "layering",
		"csi.storage.k8s.io/fstype": "ext4", "tryOtherMounters": "true"} {
		rbdParams[k] = v
	}
	fsParams := secretParams(csiFSSecret, csiFSNS)
	for k, v := range map[string]string{"clusterID": cephcsitest.ClusterID, "fsName": e.ceph.FSName, "mounter": "fuse"} {
		fsParams[k] = v
	}
	del, expand := corev1.PersistentVolumeReclaimDelete, true
	for name, c := range map[string]struct {
		driver string
		params map[string]string
	}{csiRBDClass: {csiRBDDriver, rbdParams}, csiFSClass: {csiFSDriver, fsParams}} {
		if _, err := e.kc.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Provisioner: c.driver, Parameters: c.params, ReclaimPolicy: &del, AllowVolumeExpansion: &expand}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	for name, c := range map[string]struct{ driver, secret, ns string }{
		csiRBDSnapClass: {csiRBDDriver, csiRBDSecret, csiRBDNS}, csiFSSnapClass: {csiFSDriver, csiFSSecret, csiFSNS}} {
		if _, err := e.snap.SnapshotV1().VolumeSnapshotClasses().Create(ctx, &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Driver: c.driver, DeletionPolicy: snapv1.VolumeSnapshotContentDelete,
			Parameters: map[string]string{"clusterID": cephcsitest.ClusterID, "csi.storage.k8s.io/snapshotter-secret-name": c.secret,
				"csi.storage.k8s.io/snapshotter-secret-namespace": c.ns}}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
	e.startCephCSI(tk)

	pool := ceph.NewPool(ceph.PoolOptions{})
	e.runner.t.Cleanup(pool.Close)
	tk.pool = pool
	for _, c := range []claim{
		{name: "rbd-a", class: csiRBDClass, size: "64Mi", mode: corev1.ReadWriteOnce, block: true},
		{name: "rbd-b", class: csiRBDClass, size: "64Mi", mode: corev1.ReadWriteOnce, block: true},
		{name: "fs-a", class: csiFSClass, size: "64Mi", mode: corev1.ReadWriteMany},
		{name: "fs-b", class: csiFSClass, size: "64Mi", mode: corev1.ReadWriteMany},
	} {
		pv := e.createPVC(c)
		if !volid.IsHandle(pv.Spec.CSI.VolumeHandle) || pv.Spec.CSI.Driver != map[string]string{csiRBDClass: csiRBDDriver, csiFSClass: csiFSDriver}[c.class] {
			e.t.Fatalf("PV of %s: driver %s handle %s: not ceph-csi's", c.name, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
		}
		tk.pvs[c.name] = pv
	}
	// RBD: the block volume's data is written through librbd (ceph-csi's node plugin needs the
	// rbd kernel module, which this machine lacks)
	tk.patterns[0] = bytes.Repeat([]byte("first "), 1<<17)
	e.writeImage(tk, tk.pvs["rbd-a"], 0, tk.patterns[0])
	tk.snaps["rbd-snap-1"] = e.snapshot("rbd-snap-1", "rbd-a", csiRBDSnapClass)
	tk.patterns[8<<20] = bytes.Repeat([]byte("second"), 1<<17)
	e.writeImage(tk, tk.pvs["rbd-a"], 8<<20, tk.patterns[8<<20])
	tk.snaps["rbd-snap-2"] = e.snapshot("rbd-snap-2", "rbd-a", csiRBDSnapClass)
	// CephFS: through a mount of the whole filesystem
	tk.fsRoot = e.mountFS()
	e.writeFile(filepath.Join(tk.fsRoot, tk.pvs["fs-a"].Spec.CSI.VolumeAttributes["subvolumePath"], "one"), "first")
	tk.snaps["fs-snap-1"] = e.snapshot("fs-snap-1", "fs-a", csiFSSnapClass)
	for name, vs := range tk.snaps {
		if h := e.snapshotHandle(vs); !volid.IsHandle(h) {
			e.t.Fatalf("VolumeSnapshot %s: handle %s is not ceph-csi's", name, h)
		}
	}
}

// writeImage writes data at off into the image of an RBD PV of ceph-csi's.
func (e *env) writeImage(tk *takeover, pv *corev1.PersistentVolume, off int64, data []byte) {
	e.t.Helper()
	conn, err := tk.pool.Get(context.Background(), e.ceph.Monitors, e.ceph.Admin)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Release()
	io, err := conn.Rados().OpenIOContext(pv.Spec.CSI.VolumeAttributes["pool"])
	if err != nil {
		e.t.Fatal(err)
	}
	defer io.Destroy()
	img, err := rbd.OpenImage(io, pv.Spec.CSI.VolumeAttributes["imageName"], rbd.NoSnapshot)
	if err != nil {
		e.t.Fatal(err)
	}
	defer img.Close()
	if _, err := img.WriteAt(data, off); err != nil {
		e.t.Fatal(err)
	}
}

// mountFS mounts the whole CephFS with ceph-fuse for the test's own reads and writes.
func (e *env) mountFS() string {
	e.t.Helper()
	dir := filepath.Join(e.runner.root, "fsroot")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	if out, err := exec.Command("ceph-fuse", "--id", e.ceph.Admin.ID, "--client_fs", e.ceph.FSName, dir).CombinedOutput(); err != nil {
		e.t.Fatalf("ceph-fuse: %v: %s", err, out)
	}
	e.runner.t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	return dir
}

func (e *env) writeFile(p, data string) {
	e.t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// helmInstallAll runs README blocks in one shell, each helm install command with the values
// file for local processes appended (as helmInstall does for the plain install).
func (e *env) helmInstallAll(script string, extraValues ...string) string {
	e.t.Helper()
	values := strings.Join(append([]string{e.localValues(false)}, extraValues...), " -f ")
	var out []string
	install := false // the line belongs to a helm install command
	for _, line := range strings.Split(strings.TrimRight(script, "\n"), "\n") {
		if !install {
			install = strings.HasPrefix(strings.TrimSpace(line), "helm install ")
		}
		if install && !strings.HasSuffix(line, "\\") {
			line += " -f " + values
			install = false
		}
		out = append(out, line)
	}
	return e.shell(strings.Join(out, "\n") + "\n")
}

func (e *env) stepSwapToMonoceph(tk *takeover) {
	e.stopCephCSI(tk)
	// the README's commands: read ceph-csi's settings, install monoceph under its names
	script := e.readmeBlock("cephcsi-settings") + e.readmeBlock("cephcsi-install")
	// plus the changed block service the README mentions next to the commands
	cbt := filepath.Join(e.t.TempDir(), "cbt.yaml")
	if err := os.WriteFile(cbt, []byte("rbd: {snapshotMetadata: {enabled: true}}\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	out := e.helmInstallAll(script, cbt)
	if strings.Contains(out, e.ceph.Admin.Key()) {
		e.t.Error("helm install printed the Ceph key")
	}
	e.startPodsOf(csiRBDNS, "monoceph-rbd", map[string]string{"rbd": csiRBDDriver})
	e.startPodsOf(csiFSNS, "monoceph-cephfs", map[string]string{"cephfs": csiFSDriver})
	for _, name := range []string{csiRBDDriver, csiFSDriver} {
		d, err := e.kc.StorageV1().CSIDrivers().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || d.Labels["app.kubernetes.io/name"] != "monoceph" {
			e.t.Fatalf("CSIDriver %s after the install: %v %v", name, d.GetLabels(), err)
		}
	}
}

// stepCephCSIChangedBlocks has a backup application list the blocks allocated in, and changed
// between, two VolumeSnapshots ceph-csi made, through the SnapshotMetadataService of monoceph's
// release. The image's librbd (Reef 18.2.7) diffs the volume between the two points in time by
// their snapshot IDs (the Pacific path, comparing data, is TestChangedBlocksOfCephCSISnapshots').
func (e *env) stepCephCSIChangedBlocks(tk *takeover) {
	kubeconfig := e.backupKubeconfig("monoceph-rbd-snapshot-metadata-client")
	for _, c := range []struct {
		args string
		want []extent
	}{
		{userNS + "/rbd-snap-1", []extent{{0, int64(len(tk.patterns[0]))}}},
		{"--base-snapshot rbd-snap-1 " + userNS + "/rbd-snap-2", []extent{{8 << 20, int64(len(tk.patterns[8<<20]))}}},
	} {
		got := e.changedBlocks(kubeconfig, c.args)
		if got.Capacity != 64<<20 || fmt.Sprint(coalesce(got.Extents)) != fmt.Sprint(c.want) {
			e.t.Errorf("changed-blocks %s: capacity %d, extents %v; want 64 MiB and %v", c.args, got.Capacity, coalesce(got.Extents), c.want)
		}
	}
	log := e.runner.logOf("monoceph-rbd-rbd-controller-", "/monoceph")
	if !strings.Contains(log, "Delta of ceph-csi snapshots by snapshot ID") {
		var lines []string
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "Delta of ceph-csi") {
				lines = append(lines, l)
			}
		}
		e.t.Errorf("the controller did not log a delta by snapshot ID (Reef's rbd_diff_iterate3); %d bytes of log, its deltas: %q", len(log), lines)
	}
}

// logOf is the log of the containers whose names have prefix and suffix.
func (r *podRunner) logOf(prefix, suffix string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out strings.Builder
	for _, p := range r.procs {
		if strings.HasPrefix(p.Name, prefix) && strings.HasSuffix(p.Name, suffix) {
			b, _ := os.ReadFile(p.Log)
			out.Write(b)
		}
	}
	return out.String()
}

func (e *env) stepTakenOverRBD(tk *takeover) {
	a := tk.pvs["rbd-a"]
	// a pod on node A: the attach/detach controller's VolumeAttachment names ceph-csi's
	// driver, and monoceph's attacher publishes ceph-csi's volume (the PV names no
	// controller-publish secret, as ceph-csi's classes do not: ceph-csi's Secret, the chart's
	// Ceph user, is used)
	onA := e.nodes[nodeA]
	pod := e.appPod("cephcsi-rbd-a", onA, "rbd-a")
	m := e.kubeletMount(pod, onA, a, 2*time.Minute)
	for off, want := range tk.patterns {
		if got := m.readAt(off, len(want)); !bytes.Equal(got, want) {
			e.t.Errorf("ceph-csi's volume through monoceph: %d bytes at %d differ from what was written", len(want), off)
		}
	}
	// its attachment object is keyed by the handle's UUID (attachment.Key): node A's
	// publication (the controller) and its client addresses (A's plugin, at NodeStageVolume)
	if keys := e.attachmentKeys(a); keys != "client."+onA.name+",node."+onA.name {
		e.t.Errorf("attachment object of ceph-csi's volume: keys %q; want node A's publication and client addresses", keys)
	}
	e.kubeletStop(pod, onA, m)
	if keys := e.attachmentKeys(a); keys != "" {
		e.t.Errorf("attachment object of ceph-csi's volume after the detach: keys %q", keys)
	}
	image := e.ceph.RBDPool + "/" + a.Spec.CSI.VolumeAttributes["imageName"]
	tk.pvs["rbd-a"] = e.expand("rbd-a", "128Mi")
	if size, err := e.rbdSize(image); err != nil || size != 128<<20 {
		e.t.Errorf("image %s after expansion: %d, %v; want 128 MiB", image, size, err)
	}
	// a snapshot of a ceph-csi volume is ceph-csi's in every respect
	tk.snaps["rbd-snap-3"] = e.snapshot("rbd-snap-3", "rbd-a", csiRBDSnapClass)
	if h := e.snapshotHandle(tk.snaps["rbd-snap-3"]); !volid.IsHandle(h) {
		e.t.Errorf("monoceph's snapshot of a ceph-csi volume: handle %s, want ceph-csi's format", h)
	}
	// new volumes from ceph-csi's snapshot and volume are monoceph's, with the data
	restored := e.createPVC(claim{name: "rbd-restored", class: csiRBDClass, size: "64Mi", mode: corev1.ReadWriteOnce, block: true, fromSnapshot: "rbd-snap-1"})
	clone := e.createPVC(claim{name: "rbd-clone", class: csiRBDClass, size: "128Mi", mode: corev1.ReadWriteOnce, block: true, fromClaim: "rbd-a"})
	for _, c := range []struct {
		pv   *corev1.PersistentVolume
		want map[int64][]byte
	}{
		{restored, map[int64][]byte{0: tk.patterns[0], 8 << 20: make([]byte, len(tk.patterns[8<<20]))}},
		{clone, tk.patterns},
	} {
		if volid.IsHandle(c.pv.Spec.CSI.VolumeHandle) || c.pv.Spec.CSI.Driver != csiRBDDriver {
			e.t.Errorf("new PV %s: driver %s handle %s; want monoceph's format under ceph-csi's name", c.pv.Name, c.pv.Spec.CSI.Driver, c.pv.Spec.CSI.VolumeHandle)
		}
		m := e.mountPV(c.pv, false)
		for off, want := range c.want {
			if got := m.readAt(off, len(want)); !bytes.Equal(got, want) {
				e.t.Errorf("%s: %d bytes at %d differ from its source's", c.pv.Name, len(want), off)
			}
		}
		m.unmount()
	}
	e.deletePVC("rbd-clone", clone)
	e.deletePVC("rbd-restored", restored)
	// monoceph deletes ceph-csi's snapshot and volume, journal entries included
	e.deleteSnapshot(tk.snaps["rbd-snap-1"])
	delete(tk.snaps, "rbd-snap-1")
	b := tk.pvs["rbd-b"]
	e.deletePVC("rbd-b", b)
	delete(tk.pvs, "rbd-b")
	if _, err := e.rbdSize(e.ceph.RBDPool + "/" + b.Spec.CSI.VolumeAttributes["imageName"]); err == nil {
		e.t.Errorf("image of deleted PVC rbd-b still exists")
	}
	if keys, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "listomapkeys", "csi.volumes.default"); err != nil || strings.Contains(keys, b.Spec.CSI.VolumeHandle) ||
		strings.Contains(keys, "csi.volume."+b.Name) {
		e.t.Errorf("ceph-csi's journal still names deleted volume %s: %q %v", b.Name, keys, err)
	}
	if _, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "stat", "csi.volume."+cephcsi.UUIDOf(b.Spec.CSI.VolumeHandle)); err == nil {
		e.t.Errorf("ceph-csi's journal entry of deleted volume %s is left", b.Name)
	}
}

func (e *env) stepTakenOverCephFS(tk *takeover) {
	a := tk.pvs["fs-a"]
	m := e.mountPV(a, false)
	if got := m.read("one"); got != "first" {
		e.t.Errorf("ceph-csi's CephFS volume through monoceph reads %q", got)
	}
	m.write("two", []byte("second"))
	m.unmount()
	tk.pvs["fs-a"] = e.expand("fs-a", "128Mi")
	sub := filepath.Base(filepath.Dir(a.Spec.CSI.VolumeAttributes["subvolumePath"]))
	if q, err := e.subvolumeQuota("csi", sub); err != nil || q != 128<<20 {
		e.t.Errorf("subvolume %s after expansion: quota %d, %v", sub, q, err)
	}
	tk.snaps["fs-snap-2"] = e.snapshot("fs-snap-2", "fs-a", csiFSSnapClass)
	// a shallow volume of ceph-csi's snapshot (sharing ceph-csi's reference tracker)
	shallowPV := e.createPVC(claim{name: "fs-shallow", class: csiFSClass, size: "64Mi", mode: corev1.ReadOnlyMany, fromSnapshot: "fs-snap-1"})
	if shallowPV.Spec.CSI.VolumeAttributes["shallow"] != "true" {
		e.t.Errorf("read-only PV from ceph-csi's snapshot is not shallow: %v", shallowPV.Spec.CSI.VolumeAttributes)
	}
	sh := e.mountPV(shallowPV, true)
	if got := sh.read("one"); got != "first" {
		e.t.Errorf("shallow volume of ceph-csi's snapshot reads %q", got)
	}
	if err := os.WriteFile(sh.path("new"), []byte("x"), 0o600); !errors.Is(err, syscall.EROFS) {
		e.t.Errorf("writing to the shallow volume: %v, want EROFS", err)
	}
	// ceph-csi's snapshot goes for the CO but stays for the shallow volume
	e.deleteSnapshot(tk.snaps["fs-snap-1"])
	delete(tk.snaps, "fs-snap-1")
	if got := sh.read("one"); got != "first" {
		e.t.Errorf("shallow volume after its VolumeSnapshot was deleted reads %q", got)
	}
	sh.unmount()
	e.deletePVC("fs-shallow", shallowPV)
	if n := e.subvolumeSnapshots("csi", sub); n != 1 {
		e.t.Errorf("subvolume %s has %d snapshots after the shallow volume went, want 1 (fs-snap-2)", sub, n)
	}
	b := tk.pvs["fs-b"]
	e.deletePVC("fs-b", b)
	delete(tk.pvs, "fs-b")
	if _, err := e.subvolumeQuota("csi", b.Spec.CSI.VolumeAttributes["subvolumeName"]); err == nil {
		e.t.Errorf("subvolume of deleted PVC fs-b still exists")
	}
}

func (e *env) stepBackToCephCSI(tk *takeover) {
	ctx := context.Background()
	e.shell(e.readmeBlock("cephcsi-back"))
	e.waitPodsGone("monoceph's pods deleted", csiRBDNS, csiFSNS)
	e.waitFor(60*time.Second, "monoceph's CSIDriver objects deleted", func() (bool, string) {
		_, err1 := e.kc.StorageV1().CSIDrivers().Get(ctx, csiRBDDriver, metav1.GetOptions{})
		_, err2 := e.kc.StorageV1().CSIDrivers().Get(ctx, csiFSDriver, metav1.GetOptions{})
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2), fmt.Sprint(err1, err2)
	})
	// ceph-csi is installed again
	e.startCephCSI(tk)
	// it restores from the snapshot monoceph made of its volume
	back := e.createPVC(claim{name: "rbd-back", class: csiRBDClass, size: "128Mi", mode: corev1.ReadWriteOnce, block: true, fromSnapshot: "rbd-snap-3"})
	if !volid.IsHandle(back.Spec.CSI.VolumeHandle) {
		e.t.Fatalf("ceph-csi's restore: handle %s", back.Spec.CSI.VolumeHandle)
	}
	conn, err := tk.pool.Get(ctx, e.ceph.Monitors, e.ceph.Admin)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Release()
	io, err := conn.Rados().OpenIOContext(e.ceph.RBDPool)
	if err != nil {
		e.t.Fatal(err)
	}
	defer io.Destroy()
	img, err := rbd.OpenImageReadOnly(io, back.Spec.CSI.VolumeAttributes["imageName"], rbd.NoSnapshot)
	if err != nil {
		e.t.Fatal(err)
	}
	for off, want := range tk.patterns {
		got := make([]byte, len(want))
		if _, err := img.ReadAt(got, off); err != nil || !bytes.Equal(got, want) {
			e.t.Errorf("ceph-csi's restore of monoceph's snapshot: %d bytes at %d differ (%v)", len(want), off, err)
		}
	}
	img.Close()
	// ceph-csi deletes what is left: its volumes, its snapshots and monoceph's snapshots of them
	e.deletePVC("rbd-back", back)
	for _, name := range []string{"rbd-snap-3", "rbd-snap-2", "fs-snap-2"} {
		e.deleteSnapshot(tk.snaps[name])
	}
	e.deletePVC("rbd-a", tk.pvs["rbd-a"])
	e.deletePVC("fs-a", tk.pvs["fs-a"])
	e.stopCephCSI(tk)
}

func (e *env) stepNothingLeft(tk *takeover) {
	// ceph-csi hands RBD image removal to the manager's trash tasks, which finish on their own
	e.waitFor(3*time.Minute, "no image and no trash entry in pool "+e.ceph.RBDPool, func() (bool, string) {
		ls, err1 := e.cephCmd("rbd", "ls", e.ceph.RBDPool)
		trash, err2 := e.cephCmd("rbd", "trash", "ls", "--all", e.ceph.RBDPool)
		return err1 == nil && err2 == nil && strings.TrimSpace(ls) == "" && strings.TrimSpace(trash) == "", fmt.Sprintf("images %q trash %q %v %v", ls, trash, err1, err2)
	})
	if out, err := e.cephCmd("ceph", "fs", "subvolume", "ls", e.ceph.FSName, "csi", "--format", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		e.t.Errorf("subvolumes left in group csi: %s %v", out, err)
	}
	// the journals of both drivers: no key left (ceph-csi itself leaves its emptied directory
	// objects; monoceph removes them with their last key)
	for _, loc := range []struct{ pool, ns string }{{e.ceph.RBDPool, ""}, {"cephfs." + e.ceph.FSName + ".meta", "csi"}} {
		out, err := e.cephCmd("rados", "-p", loc.pool, "-N", loc.ns, "ls")
		if err != nil {
			e.t.Fatal(err)
		}
		for _, oid := range strings.Fields(out) {
			if strings.HasPrefix(oid, "rt-backingsnapshot-") || strings.HasPrefix(oid, "monoceph.") {
				e.t.Errorf("%s/%s: %s left", loc.pool, loc.ns, oid)
			}
			if strings.HasPrefix(oid, "csi.") {
				if keys, err := e.cephCmd("rados", "-p", loc.pool, "-N", loc.ns, "listomapkeys", oid); err != nil || strings.TrimSpace(keys) != "" {
					e.t.Errorf("%s/%s: journal object %s keeps %q (%v)", loc.pool, loc.ns, oid, keys, err)
				}
			}
		}
	}
	// ceph-csi's empty directory objects go too, and the subvolume group, as a user cleaning up
	for _, oid := range []string{"csi.volumes.default", "csi.snaps.default"} {
		_, _ = e.cephCmd("rados", "-p", e.ceph.RBDPool, "rm", oid)
		_, _ = e.cephCmd("rados", "-p", "cephfs."+e.ceph.FSName+".meta", "-N", "csi", "rm", oid)
	}
}

// purgeCephCSIObjects removes, past both drivers, every image, trash entry, subvolume and
// journal object an e2e test may have left in the pool's default namespace and the
// subvolume group csi (the test's own: the e2e cluster holds nothing else there).
func (e *env) purgeCephCSIObjects() {
	run := func(args ...string) string {
		out, _ := e.cephCmd(args...)
		return out
	}
	for range 3 { // clones before their parents
		for _, img := range strings.Fields(run("rbd", "ls", e.ceph.RBDPool)) {
			run("rbd", "snap", "purge", e.ceph.RBDPool+"/"+img)
			run("rbd", "rm", e.ceph.RBDPool+"/"+img)
		}
	}
	var trash []struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(run("rbd", "trash", "ls", "--all", "--format", "json", e.ceph.RBDPool)), &trash) == nil {
		for _, tr := range trash {
			run("rbd", "trash", "rm", "--force", e.ceph.RBDPool+"/"+tr.ID)
		}
	}
	var subs []struct {
		Name string `json:"name"`
	}
	if json.Unmarshal([]byte(run("ceph", "fs", "subvolume", "ls", e.ceph.FSName, "csi", "--format", "json")), &subs) == nil {
		for _, sv := range subs {
			var snaps []struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal([]byte(run("ceph", "fs", "subvolume", "snapshot", "ls", e.ceph.FSName, sv.Name, "csi", "--format", "json")), &snaps)
			for _, sn := range snaps {
				run("ceph", "fs", "subvolume", "snapshot", "rm", e.ceph.FSName, sv.Name, sn.Name, "csi", "--force")
			}
			run("ceph", "fs", "subvolume", "rm", e.ceph.FSName, sv.Name, "csi", "--force")
		}
	}
	for _, loc := range []struct{ pool, ns string }{{e.ceph.RBDPool, ""}, {"cephfs." + e.ceph.FSName + ".meta", "csi"}} {
		for _, oid := range strings.Fields(run("rados", "-p", loc.pool, "-N", loc.ns, "ls")) {
			if strings.HasPrefix(oid, "csi.") || strings.HasPrefix(oid, "rt-backingsnapshot-") || strings.HasPrefix(oid, "monoceph.") {
				run("rados", "-p", loc.pool, "-N", loc.ns, "rm", oid)
			}
		}
	}
}
