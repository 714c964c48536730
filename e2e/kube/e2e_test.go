// Package kube is the end-to-end test of the Helm chart on a real Kubernetes control plane
// (etcd, kube-apiserver, kube-controller-manager) and the local Ceph cluster: the chart is
// installed with the README's commands, monoceph's containers run with podman from the image
// make built, the real kubernetes-csi sidecars and csi-addons as local processes, and a user's
// PVCs, snapshots, expansions, network fences and a backup application's changed-block
// listing go through them to Ceph.
package kube

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestHelmChartEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.installCluster()
	for _, ns := range []string{userNS, "backup"} {
		if _, err := e.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		run  func(*env)
	}{
		{"chart 0.1.0 installed and used then upgraded to this chart", (*env).stepInstall},
		{"a volume of a class without publish secrets (as chart 0.1.0 made) attaches with the controller's own Secret", (*env).stepPreUpgradeAttach},
		{"RBD volume, snapshot, clone, expansion and node path", (*env).stepRBD},
		{"changed blocks between two VolumeSnapshots", (*env).stepChangedBlocks},
		{"VolumeGroupSnapshot of two PVCs is one point in time", (*env).stepGroupSnapshot},
		{"CephFS volume, shallow read-only restore, expansion and node path", (*env).stepCephFS},
		{"VolumeAttributesClass: QoS at create and switched live, a bad class refused", (*env).stepVolumeAttributesClass},
		{"NetworkFence fences and unfences", (*env).stepFence},
		{"ReadWriteOnce on two nodes; a lost node is fenced automatically", (*env).stepTwoNodes},
		{"no component was refused by RBAC", (*env).stepNoDenials},
		{"helm uninstall removes every object but the kept Secrets", (*env).stepUninstall},
	}
	for _, s := range steps {
		start := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			sub := *e
			sub.t = t
			s.run(&sub)
		})
		t.Logf("%s: %v (%.1f s)", s.name, map[bool]string{true: "ok", false: "FAILED"}[ok], time.Since(start).Seconds())
		if !ok {
			t.FailNow()
		}
	}
}

var installed []*unstructured.Unstructured

// preUpgrade is a PV like those chart 0.1.0 provisioned: its StorageClass named no
// controller-publish secret (stepInstall), and what was written to it.
var (
	preUpgrade     *corev1.PersistentVolume
	preUpgradeData = "written before volumes were attached"
)

// stepInstall installs the chart as released in 0.1.0 (RBD volumes not attached) with the
// README's command and runs it; then upgrades to this chart with the README's upgrade command:
// the pre-upgrade hook replaces the RBD CSIDriver (attachRequired is immutable) and
// StorageClass (new secret parameters), the rollout replaces the running pods, and everything
// the release defines exists. (The pods of 0.1.0 run this build's binaries, so no volume is
// provisioned through them; a PV of 0.1.0's kind is made after the upgrade, with a class like
// 0.1.0's.)
func (e *env) stepInstall() {
	ctx := context.Background()
	e.helmInstall(chart01)
	e.startPods()
	// registered on the whole test after the processes started, so it runs while they still
	// serve: a failed step's claims and snapshots go through the driver, and Ceph keeps nothing
	e.runner.t.Cleanup(e.deleteLeftovers)
	uids := map[string]string{}
	for _, d := range []string{rbdDriver, fsDriver} {
		cd, err := e.kc.StorageV1().CSIDrivers().Get(ctx, d, metav1.GetOptions{})
		if err != nil || *cd.Spec.AttachRequired {
			e.t.Fatalf("CSIDriver %s of chart 0.1.0: %v, %v", d, cd, err)
		}
		uids[d] = string(cd.UID)
	}

	before := e.tlsSecret()
	e.helmUpgrade()
	// the CA backup applications trust stays
	if after := e.tlsSecret(); !bytes.Equal(before["ca.crt"], after["ca.crt"]) {
		e.t.Error("helm upgrade replaced the changed block service's CA")
	}
	for d, attach := range map[string]bool{rbdDriver: true, fsDriver: false} {
		cd, err := e.kc.StorageV1().CSIDrivers().Get(ctx, d, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if *cd.Spec.AttachRequired != attach || (string(cd.UID) != uids[d]) != attach {
			e.t.Errorf("CSIDriver %s after the upgrade: attachRequired %v, replaced %v; want %v, %v", d, *cd.Spec.AttachRequired, string(cd.UID) != uids[d], attach, attach)
		}
	}
	sc, err := e.kc.StorageV1().StorageClasses().Get(ctx, "monoceph-rbd", metav1.GetOptions{})
	if err != nil || sc.Parameters["csi.storage.k8s.io/controller-publish-secret-name"] != release+"-ceph-user" {
		e.t.Fatalf("RBD StorageClass after the upgrade: %v, %v", sc, err)
	}
	e.startPods()

	// a volume as chart 0.1.0 made them: its class named no controller-publish secret
	old := sc.DeepCopy()
	old.ObjectMeta = metav1.ObjectMeta{Name: "monoceph-rbd-0-1-0"}
	delete(old.Parameters, "csi.storage.k8s.io/controller-publish-secret-name")
	delete(old.Parameters, "csi.storage.k8s.io/controller-publish-secret-namespace")
	if _, err := e.kc.StorageV1().StorageClasses().Create(ctx, old, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	preUpgrade = e.createPVC(claim{name: "pre-upgrade", class: old.Name, size: "64Mi", mode: corev1.ReadWriteOnce})
	if preUpgrade.Spec.CSI.ControllerPublishSecretRef != nil {
		e.t.Fatalf("a PV of a 0.1.0 class names a controller-publish secret: %v", preUpgrade.Spec.CSI.ControllerPublishSecretRef)
	}
	m := e.mountPV(preUpgrade, false)
	m.write("data", []byte(preUpgradeData))
	m.unmount()

	installed = e.releaseObjects()
	kinds := map[string]int{}
	for _, o := range installed {
		kinds[o.GetKind()]++
	}
	e.t.Logf("release objects: %v", kinds)
	for kind, n := range map[string]int{"Deployment": 2, "DaemonSet": 4, "CSIDriver": 2, "ConfigMap": 1, "StorageClass": 2,
		"VolumeSnapshotClass": 2, "VolumeGroupSnapshotClass": 1, "Service": 1, "SnapshotMetadataService": 1, "ServiceAccount": 4, "ClusterRole": 3, "Secret": 2} {
		if kinds[kind] != n {
			e.t.Errorf("release has %d %s objects, want %d", kinds[kind], kind, n)
		}
	}
	if m := e.missing(installed, false); len(m) > 0 {
		e.t.Fatalf("objects of the release missing from the API server: %v", m)
	}
	// upgrading again changes nothing: the hook finds nothing to replace, the pods stay
	e.helmUpgrade()
	if cd, err := e.kc.StorageV1().CSIDrivers().Get(ctx, rbdDriver, metav1.GetOptions{}); err != nil || !*cd.Spec.AttachRequired {
		e.t.Fatalf("CSIDriver after a second upgrade: %v, %v", cd, err)
	}
	e.startPods()
}

// tlsSecret is the data of the changed block service's TLS Secret; it checks the
// SnapshotMetadataService publishes the same CA.
func (e *env) tlsSecret() map[string][]byte {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.kc.CoreV1().Secrets(namespace).Get(ctx, release+"-rbd-snapshot-metadata-tls", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	sms, err := e.dyn.Resource(schema.GroupVersionResource{Group: "cbt.storage.k8s.io", Version: "v1beta1", Resource: "snapshotmetadataservices"}).
		Get(ctx, rbdDriver, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ca, _, _ := unstructured.NestedString(sms.Object, "spec", "caCert")
	if ca != base64.StdEncoding.EncodeToString(s.Data["ca.crt"]) || len(s.Data["ca.crt"]) == 0 {
		e.t.Errorf("SnapshotMetadataService caCert does not match the TLS Secret's ca.crt")
	}
	return s.Data
}

func (e *env) stepRBD() {
	pv := e.createPVC(claim{name: "rbd-data", class: "monoceph-rbd", size: "64Mi", mode: corev1.ReadWriteOnce})
	image := e.rbdImage(pv)
	if size, err := e.rbdSize(image); err != nil || size != 64<<20 {
		e.t.Fatalf("image %s of PV %s: size %d, %v; want 64 MiB", image, pv.Name, size, err)
	}
	m := e.mountPV(pv, false)
	m.write("greeting", []byte("written before the snapshot"))
	vs := e.snapshot("rbd-snap", "rbd-data", "monoceph-rbd")
	m.write("greeting", []byte("written after the snapshot"))

	restoredPV := e.createPVC(claim{name: "rbd-restored", class: "monoceph-rbd", size: "64Mi", mode: corev1.ReadWriteOnce, fromSnapshot: "rbd-snap"})
	restored := e.mountPV(restoredPV, false)
	if got := restored.read("greeting"); got != "written before the snapshot" {
		e.t.Errorf("clone of the snapshot reads %q", got)
	}
	restored.unmount()

	pv = e.expand("rbd-data", "128Mi")
	if size, err := e.rbdSize(image); err != nil || size != 128<<20 {
		e.t.Errorf("image %s after expansion: size %d, %v; want 128 MiB", image, size, err)
	}
	m.unmount()

	e.deletePVC("rbd-restored", restoredPV)
	e.deleteSnapshot(vs)
	e.deletePVC("rbd-data", pv)
	for _, img := range []string{image, e.rbdImage(restoredPV)} {
		if _, err := e.rbdSize(img); err == nil || !strings.Contains(err.Error(), "No such file or directory") {
			e.t.Errorf("image %s after its PVC was deleted: %v, want it gone", img, err)
		}
	}
}

func (e *env) stepCephFS() {
	pv := e.createPVC(claim{name: "fs-data", class: "monoceph-cephfs", size: "64Mi", mode: corev1.ReadWriteMany})
	group, name := e.subvolume(pv)
	if q, err := e.subvolumeQuota(group, name); err != nil || q != 64<<20 {
		e.t.Fatalf("subvolume %s/%s: quota %d, %v; want 64 MiB", group, name, q, err)
	}
	m := e.mountPV(pv, false)
	m.write("greeting", []byte("written before the snapshot"))
	vs := e.snapshot("fs-snap", "fs-data", "monoceph-cephfs")
	m.write("greeting", []byte("written after the snapshot"))

	// a read-only claim from a snapshot is a shallow volume: no subvolume, the snapshot itself
	shallowPV := e.createPVC(claim{name: "fs-shallow", class: "monoceph-cephfs", size: "64Mi", mode: corev1.ReadOnlyMany, fromSnapshot: "fs-snap"})
	if shallowPV.Spec.CSI.VolumeAttributes["shallow"] != "true" {
		e.t.Errorf("restored read-only PV is not shallow: volume attributes %v", shallowPV.Spec.CSI.VolumeAttributes)
	}
	shallow := e.mountPV(shallowPV, true)
	if got := shallow.read("greeting"); got != "written before the snapshot" {
		e.t.Errorf("shallow volume reads %q", got)
	}
	err := os.WriteFile(shallow.path("new"), []byte("x"), 0o600)
	if !errors.Is(err, syscall.EROFS) {
		e.t.Errorf("writing to the shallow volume: %v, want EROFS", err)
	}

	pv = e.expand("fs-data", "128Mi")
	if q, err := e.subvolumeQuota(group, name); err != nil || q != 128<<20 {
		e.t.Errorf("subvolume %s/%s after expansion: quota %d, %v; want 128 MiB", group, name, q, err)
	}
	m.unmount()

	// the VolumeSnapshot goes first while the shallow volume still uses it: the volume keeps
	// reading, and the Ceph snapshot stays until the shallow volume is deleted too
	e.deleteSnapshot(vs)
	if got := shallow.read("greeting"); got != "written before the snapshot" {
		e.t.Errorf("shallow volume after its VolumeSnapshot was deleted reads %q", got)
	}
	if n := e.subvolumeSnapshots(group, name); n != 1 {
		e.t.Errorf("subvolume %s has %d snapshots while a shallow volume uses one, want 1", name, n)
	}
	shallow.unmount()
	e.deletePVC("fs-shallow", shallowPV)
	if n := e.subvolumeSnapshots(group, name); n != 0 {
		e.t.Errorf("subvolume %s has %d snapshots after the last user went, want 0", name, n)
	}
	e.deletePVC("fs-data", pv)
	if out, err := e.cephCmd("ceph", "fs", "subvolume", "ls", e.ceph.FSName, "--group_name", group, "--format", "json"); err != nil || strings.Contains(out, name) {
		e.t.Errorf("subvolume %s still listed after its PVC was deleted: %s %v", name, out, err)
	}
}

// stepChangedBlocks has a backup application, bound to the chart's client ClusterRole, list
// the blocks changed between two VolumeSnapshots through the SnapshotMetadataService the chart
// published (discovery, service account token, TLS with the chart's generated CA), and
// compares them with what rbd diff reports.
func (e *env) stepChangedBlocks() {
	pv := e.createPVC(claim{name: "cbt", class: "monoceph-rbd", size: "64Mi", mode: corev1.ReadWriteOnce})
	m := e.mountPV(pv, false)
	m.write("base", bytes.Repeat([]byte("a"), 1<<20))
	s1 := e.snapshot("cbt-1", "cbt", "monoceph-rbd")
	m.write("incremental", bytes.Repeat([]byte("b"), 2<<20))
	s2 := e.snapshot("cbt-2", "cbt", "monoceph-rbd")
	m.unmount()

	got := e.changedBlocks(e.backupKubeconfig(release+"-snapshot-metadata-client"), "--base-snapshot cbt-1 "+userNS+"/cbt-2")

	h1, err := volid.ParseRBDSnapshot(e.snapshotHandle(s1))
	if err != nil {
		e.t.Fatal(err)
	}
	h2, err := volid.ParseRBDSnapshot(e.snapshotHandle(s2))
	if err != nil {
		e.t.Fatal(err)
	}
	image := e.rbdImage(pv)
	diff, err := e.cephCmd("rbd", "diff", "--format", "json", "--from-snap", rbdname.Snapshot(h1.SnapUID), image+"@"+rbdname.Snapshot(h2.SnapUID))
	if err != nil {
		e.t.Fatal(err)
	}
	var want []extent
	if err := json.Unmarshal([]byte(diff), &want); err != nil {
		e.t.Fatal(err)
	}
	var changed int64
	for _, x := range got.Extents {
		changed += x.Length
	}
	e.t.Logf("changed blocks: %d extents, %d bytes, type %s, capacity %d", len(got.Extents), changed, got.Type, got.Capacity)
	if got.Capacity != 64<<20 || changed < 2<<20 {
		e.t.Errorf("capacity %d, %d bytes changed; want 64 MiB and at least the 2 MiB written", got.Capacity, changed)
	}
	if g, w := coalesce(got.Extents), coalesce(want); fmt.Sprint(g) != fmt.Sprint(w) {
		e.t.Errorf("changed blocks differ from rbd diff:\n got %v\nwant %v", g, w)
	}
	e.deleteSnapshot(s2)
	e.deleteSnapshot(s1)
	e.deletePVC("cbt", pv)
}

// backupKubeconfig is the kubeconfig of a backup application, service account backup/backup
// bound to the chart's client ClusterRole clusterRole, which may request its own token and
// nobody else's (as NOTES.txt says).
func (e *env) backupKubeconfig(clusterRole string) string {
	ctx := context.Background()
	if _, err := e.kc.CoreV1().ServiceAccounts("backup").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "backup"}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "backup-cbt"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "backup", Namespace: "backup"}},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kc.RbacV1().Roles("backup").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "backup-token"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"backup"}}}},
		metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kc.RbacV1().RoleBindings("backup").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "backup-token"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "backup-token"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "backup", Namespace: "backup"}}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return e.cp.Kubeconfig(e.t, e.cp.Token(e.t, "backup", "backup"))
}

// cbtAnswer is what `monoceph changed-blocks -o json` answers.
type cbtAnswer struct {
	Type     string   `json:"blockMetadataType"`
	Capacity int64    `json:"volumeCapacityBytes"`
	Extents  []extent `json:"extents"`
}

// changedBlocks runs the changed-blocks command as the backup application of kubeconfig.
func (e *env) changedBlocks(kubeconfig, args string) cbtAnswer {
	e.t.Helper()
	out := e.shell(fmt.Sprintf("monoceph changed-blocks --timeout 2m --kubeconfig %s --service-account backup/backup -o json %s", kubeconfig, args))
	var got cbtAnswer
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		e.t.Fatalf("changed-blocks output: %v\n%s", err, out)
	}
	return got
}

type extent struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// coalesce merges adjacent extents, so two correct listings compare equal however they were
// split into messages.
func coalesce(xs []extent) []extent {
	var out []extent
	for _, x := range xs {
		if n := len(out); n > 0 && out[n-1].Offset+out[n-1].Length == x.Offset {
			out[n-1].Length += x.Length
			continue
		}
		out = append(out, x)
	}
	return out
}

var networkFences = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "networkfences"}
var csiAddonsNodes = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "csiaddonsnodes"}

// stepFence creates a NetworkFence: the csi-addons controller finds the chart's csi-addons
// sidecar through its CSIAddonsNode and lease, the sidecar calls monoceph's FenceController.
func (e *env) stepFence() { e.fenceWith(rbdDriver, namespace, release+"-ceph-user", e.ceph.ID) }

// fenceWith fences and unfences a range through a NetworkFence of driver, whose Secret
// ns/secret and clusterID it names.
func (e *env) fenceWith(driver, ns, secret, clusterID string) {
	ctx := context.Background()
	e.waitFor(60*time.Second, "a connected CSIAddonsNode for "+driver, func() (bool, string) {
		list, err := e.dyn.Resource(csiAddonsNodes).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, n := range list.Items {
			state, _, _ := unstructured.NestedString(n.Object, "status", "state")
			name, _, _ := unstructured.NestedString(n.Object, "spec", "driver", "name")
			if name == driver && state == "Connected" {
				return true, ""
			}
			msg, _, _ := unstructured.NestedString(n.Object, "status", "message")
			seen = append(seen, fmt.Sprintf("%s: %s %s", n.GetName(), state, msg))
		}
		return false, fmt.Sprint(seen)
	})
	const cidr = "198.51.100.16/28"
	// a range is <network>:0/<prefix> (listed with a cidr: prefix, see listsEntry)
	entry := "198.51.100.16:0/28"
	if out, err := e.cephCmd("ceph", "osd", "blocklist", "ls"); err != nil || listsEntry(out, entry) {
		e.t.Fatalf("blocklist before the fence: %v; already has %s? %s", err, entry, out)
	}
	e.t.Cleanup(func() {
		if e.t.Failed() { // never leave the range fenced on the shared cluster
			_, _ = e.cephCmd("ceph", "osd", "blocklist", "range", "rm", cidr)
		}
	})
	nf := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "csiaddons.openshift.io/v1alpha1", "kind": "NetworkFence",
		"metadata": map[string]any{"name": "e2e-fence"},
		"spec": map[string]any{
			"driver": driver, "fenceState": "Fenced", "cidrs": []any{cidr},
			"secret":     map[string]any{"name": secret, "namespace": ns},
			"parameters": map[string]any{"clusterID": clusterID},
		},
	}}
	if _, err := e.dyn.Resource(networkFences).Create(ctx, nf, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFence("fencing operation successful")
	if out, err := e.cephCmd("ceph", "osd", "blocklist", "ls"); err != nil || !listsEntry(out, entry) {
		e.t.Fatalf("blocklist after the fence lacks %s: %s %v", entry, out, err)
	}
	// deleting a NetworkFence does not unfence (csi-addons v0.14.0 only drops its finalizer):
	// unfencing is fenceState Unfenced
	cur, err := e.dyn.Resource(networkFences).Get(ctx, "e2e-fence", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := unstructured.SetNestedField(cur.Object, "Unfenced", "spec", "fenceState"); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.dyn.Resource(networkFences).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFence("unfencing operation successful")
	if out, err := e.cephCmd("ceph", "osd", "blocklist", "ls"); err != nil || listsEntry(out, entry) {
		e.t.Fatalf("blocklist after the unfence still has %s: %s %v", entry, out, err)
	}
	if err := e.dyn.Resource(networkFences).Delete(ctx, "e2e-fence", metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(30*time.Second, "NetworkFence deleted", func() (bool, string) {
		_, err := e.dyn.Resource(networkFences).Get(ctx, "e2e-fence", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func (e *env) waitFence(message string) {
	e.t.Helper()
	e.waitFor(90*time.Second, "NetworkFence: "+message, func() (bool, string) {
		nf, err := e.dyn.Resource(networkFences).Get(context.Background(), "e2e-fence", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		result, _, _ := unstructured.NestedString(nf.Object, "status", "result")
		msg, _, _ := unstructured.NestedString(nf.Object, "status", "message")
		return result == "Succeeded" && msg == message, fmt.Sprintf("result %q message %q", result, msg)
	})
}

// stepNoDenials: every component ran with the chart's RBAC; a missing rule often shows only as
// a retried, logged "forbidden" while the test still passes.
func (e *env) stepNoDenials() {
	if d := e.runner.denied(); len(d) > 0 {
		e.t.Errorf("%d log lines of RBAC denials:\n%s", len(d), strings.Join(d, "\n"))
	}
}

// kept are the objects `helm uninstall` leaves on purpose (helm.sh/resource-policy: keep). The
// Ceph user Secrets are the README's own, not the release's.
var kept = map[string]bool{"Secret/" + release + "-rbd-snapshot-metadata-ca": true}

func (e *env) stepUninstall() {
	e.shell(e.readmeBlock("helm-uninstall"))
	e.waitPodsGone("the chart's pods deleted", namespace)
	var gone, stay []*unstructured.Unstructured
	for _, o := range installed {
		if kept[o.GetKind()+"/"+o.GetName()] {
			stay = append(stay, o)
		} else {
			gone = append(gone, o)
		}
	}
	if len(stay) != len(kept) {
		e.t.Fatalf("the release had %d of the %d objects it keeps", len(stay), len(kept))
	}
	e.waitFor(60*time.Second, "the release's objects deleted", func() (bool, string) {
		left := e.missing(gone, true)
		return len(left) == 0, fmt.Sprint(left)
	})
	if m := e.missing(stay, false); len(m) > 0 {
		e.t.Errorf("uninstall deleted %v, which it must keep", m)
	}
}
