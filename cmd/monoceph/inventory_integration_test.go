package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsitest"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/inventory"
	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/owner"
	monorbd "github.com/monoceph/monoceph/internal/rbd"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestInventoryOnKubernetes runs `monoceph inventory` against the local cluster and a real
// kube-apiserver with three volumes: one attached to its PV, one whose PV is gone (orphaned),
// one whose image is gone under its PV (dangling). --delete-orphans removes exactly the orphan,
// and the next inventory has none.
func TestInventoryOnKubernetes(t *testing.T) {
	cl := cephtest.Env(t)
	cp := kubetest.Start(t, kubetest.Options{})
	kc, err := kubernetes.NewForConfig(cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	mapFile := cl.ClusterMapFile(t, dir, "")
	store := cl.Clusters(t, "")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	conn, err := pool.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	ns, io := cephcsitest.RBDNamespace(t, cl, conn)
	ctrl := monorbd.NewController(monorbd.Options{Clusters: store, Pool: pool, Locks: oplock.New()})
	params := map[string]string{"clusterID": cl.ID, "pool": cl.RBDPool, "radosNamespace": ns}
	create := func(pv string) string {
		p := map[string]string{owner.PVName: pv}
		for k, v := range params {
			p[k] = v
		}
		resp, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: pv, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 20},
			VolumeCapabilities: []*csi.VolumeCapability{{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
				AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}},
			Parameters: p, Secrets: cl.Secrets()})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetVolume().GetVolumeId()
	}
	bound, orphan, dangling := create("pv-bound"), create("pv-orphan"), create("pv-dangling")
	dv, _ := volid.ParseRBDVolume(dangling)
	if err := rbd.RemoveImage(io, rbdname.Image(dv.UID)); err != nil {
		t.Fatal(err)
	}

	const driverName = "rbd.monoceph.io"
	if _, err := kc.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "rbd"},
		Provisioner: driverName, Parameters: params}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, handle := range map[string]string{"pv-bound": bound, "pv-dangling": dangling} {
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("4Mi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:               &corev1.ObjectReference{Namespace: "apps", Name: "c-" + name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: handle}}}}
		if _, err := kc.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pvName := "pv-bound"
	if _, err := kc.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-1"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: driverName, NodeName: "node-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(cl.Admin.Key()), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"inventory", "--kubeconfig", cp.Kubeconfig(t, cp.AdminToken), "--cluster-config", mapFile,
		"--ceph-user", cl.Admin.ID, "--ceph-key-file", keyFile, "--driver", driverName}
	inv := func(extra ...string) ([]inventory.Entry, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(append(append(base, "-o", "json"), extra...), &stdout, &stderr); code != 0 {
			t.Fatalf("inventory %v: code %d: %s", extra, code, stderr.String())
		}
		var entries []inventory.Entry
		if err := json.Unmarshal(stdout.Bytes(), &entries); err != nil {
			t.Fatalf("%s: %v", stdout.String(), err)
		}
		return entries, stderr.String()
	}
	summary := func(entries []inventory.Entry) string {
		var out []string
		for _, e := range entries {
			out = append(out, fmt.Sprintf("%s:%s:%s:%s", e.State, e.PV, e.Node, e.Owner[owner.PVName]))
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	entries, _ := inv()
	if got, want := summary(entries), "dangling:pv-dangling:: in-use:pv-bound:node-1:pv-bound orphaned:::pv-orphan"; got != want {
		t.Fatalf("inventory\n got %s\nwant %s", got, want)
	}
	if d, msg := inv("--delete-orphans"); len(d) != 0 {
		t.Fatalf("the default grace (24h) let young orphans be deleted: %v (%s)", d, msg)
	}
	d, msg := inv("--delete-orphans", "--grace", "0s")
	if len(d) != 1 || d[0].Handle != orphan || !strings.Contains(msg, "dry run") {
		t.Fatalf("dry run listed %v (%s), want only %s", d, msg, orphan)
	}
	if d, msg = inv("--delete-orphans", "--grace", "0s", "--dry-run=false"); len(d) != 1 || d[0].Handle != orphan {
		t.Fatalf("deleted %v (%s), want only %s", d, msg, orphan)
	}
	entries, _ = inv()
	if got, want := summary(entries), "dangling:pv-dangling:: in-use:pv-bound:node-1:pv-bound"; got != want {
		t.Fatalf("after --delete-orphans\n got %s\nwant %s", got, want)
	}
	t.Logf("inventory table:\n%s", table(t, append(base, "-o", "table")))
}

func table(t *testing.T, args []string) string {
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("code %d: %s", code, stderr.String())
	}
	return stdout.String()
}
