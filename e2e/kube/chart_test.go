package kube

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/kubetest"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// the minimal install of the README: monitors, a cluster ID and a Ceph user
var minimal = []string{"cluster.id=prod", "cluster.monitors={10.0.0.1:6789,10.0.0.2}", "cephUser.id=kubernetes",
	"cephUser.key=AQBs3w1oAAAAABAAwmQYHKlKvZx2g3g4ywLLTw=="}

// helmCmd runs the helm binary make built on the chart.
func helmCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("MONOCEPH_E2E_BIN")
	if bin == "" {
		if os.Getenv("MONOCEPH_E2E") == "1" {
			t.Fatal("MONOCEPH_E2E=1 but MONOCEPH_E2E_BIN is unset: run make e2e")
		}
		t.Skip("chart tests: run make e2e (needs helm and kube-apiserver built by make)")
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), args...)
	cmd.Dir = "../.."
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), err
}

// withMinimal is the minimal install's --set flags followed by extra's.
func withMinimal(extra ...string) []string {
	return sets(append(append([]string{}, minimal...), extra...)...)
}

func sets(values ...string) []string {
	var args []string
	for _, v := range values {
		args = append(args, "--set", v)
	}
	return args
}

// checkRejected: helm template with the minimal values and set fails, its error naming wantErr.
func checkRejected(t *testing.T, set, wantErr string) {
	t.Helper()
	out, err := helmCmd(t, append([]string{"template", "x", "charts/monoceph"}, withMinimal(set)...)...)
	if err == nil {
		t.Fatalf("--set %s rendered:\n%.300s", set, out)
	}
	if !strings.Contains(err.Error(), wantErr) {
		t.Errorf("--set %s: %v; want it to name %q", set, err, wantErr)
	}
}

func TestChartLint(t *testing.T) {
	for _, extra := range [][]string{nil, {"rbd.snapshotMetadata.enabled=true", "rbd.csiAddons.enabled=true", "cephfs.csiAddons.enabled=true",
		"controller.fenceNodeNetworks={10.20.0.0/16,2001:db8::/64}"}} {
		args := append([]string{"lint", "--strict", "charts/monoceph"}, withMinimal(extra...)...)
		if out, err := helmCmd(t, args...); err != nil {
			t.Errorf("helm %v: %v\n%s", args, err, out)
		}
	}
}

// TestChartRejectsBadValues: values.schema.json (and required checks) stop a bad install
// before anything reaches the cluster, naming the field.
func TestChartRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		name, set, wantErr string
	}{
		{"no monitors", "cluster.monitors=null", "missing property 'monitors'"},
		{"cluster ID with a slash", "cluster.id=a/b", "at '/cluster/id'"},
		{"cluster ID too long", "cluster.id=" + strings.Repeat("x", 37), "at '/cluster/id'"},
		{"misspelt key", "rbd.storageclass.create=true", "'storageclass' not allowed"},
		{"duration without unit", "controller.cephOpTimeout=30", "at '/controller/cephOpTimeout'"},
		{"clone wait without unit", "cephfs.cloneWait=8", "at '/cephfs/cloneWait'"},
		{"node command timeout without unit", "node.commandTimeout=120", "at '/node/commandTimeout'"},
		{"Ceph user that is an option", "cephUser.id=-oX", "at '/cephUser/id'"},
		{"port out of range", "rbd.controllerMetricsPort=70000", "at '/rbd/controllerMetricsPort'"},
		{"unknown mounter", "rbd.storageClass.mounter=nbd", "at '/rbd/storageClass/mounter'"},
		{"storage class without pool", "rbd.storageClass.create=true", "at '/rbd/storageClass/pool'"},
		{"CephFS storage class without filesystem", "cephfs.storageClass.create=true", "at '/cephfs/storageClass/fsName'"},
		{"key that is not base64", "cephUser.key=not a key", "at '/cephUser/key'"},
		{"no Ceph key and no existing secret", "cephUser.key=", "at '/cephUser'"},
		{"block type", "rbd.snapshotMetadata.blockType=blocks", "at '/rbd/snapshotMetadata/blockType'"},
		{"zero replicas", "controller.replicas=0", "at '/controller/replicas'"},
		{"node network that is no CIDR", "controller.fenceNodeNetworks={10.0.0.0}", "at '/controller/fenceNodeNetworks/0'"},
		{"RADOS namespace too long", "cluster.rbd.radosNamespace=" + strings.Repeat("n", 33), "at '/cluster/rbd/radosNamespace'"},
		{"state directory too long for FUSE sockets", "node.stateDir=/" + strings.Repeat("d", 40), "at '/node/stateDir'"},
		{"pod label replacing a selector label", `controller.podLabels.app\.kubernetes\.io/component=x`, "invalid propertyName 'app.kubernetes.io/component'"},
		{"two active replicas without leader election", "controller.leaderElection.enabled=false", "controller.replicas > 1 needs controller.leaderElection.enabled"},
		{"no driver", "rbd.enabled=false,cephfs.enabled=false", "nothing to install"},
		{"node user without a key", "cephUser.node.id=n", "cephUser.node.key is required"},
		{"two node plugins on one host port", "cephfs.nodeMetricsPort=9080", "cephfs.nodeMetricsPort: port 9080 is also rbd.nodeMetricsPort"},
		{"two mount holders on one host port", "cephfs.mounterMetricsPort=9081", "cephfs.mounterMetricsPort: port 9081 is also rbd.mounterMetricsPort"},
		{"existing TLS Secret without its CA (no cluster to read it from)", "rbd.snapshotMetadata.enabled=true,rbd.snapshotMetadata.tls.existingSecret=x", "set caCert"},
		{"group snapshot class without group snapshots", "rbd.groupSnapshotClass.create=true", "rbd.groupSnapshotClass.create needs groupSnapshots.enabled"},
		{"group snapshot class deletion policy", "groupSnapshots.enabled=true,cephfs.groupSnapshotClass.deletionPolicy=Keep", "at '/cephfs/groupSnapshotClass/deletionPolicy'"},
	} {
		t.Run(c.name, func(t *testing.T) { checkRejected(t, c.set, c.wantErr) })
	}
}

// TestChartObjectsValidOnAPIServer renders the chart with several value sets and creates
// every object on a real kube-apiserver as a server-side dry run with strict field
// validation: the API server's own OpenAPI schemas judge the output.
func TestChartObjectsValidOnAPIServer(t *testing.T) {
	if _, err := helmCmd(t, "version"); err != nil {
		t.Fatal(err)
	}
	cp := kubetest.Start(t, kubetest.Options{})
	csiAddons := kubetest.ModuleDir(t, "../../scripts/tools/csi-addons", "github.com/csi-addons/kubernetes-csi-addons")
	cp.ApplyCRDs(t, append(kubetest.SnapshotCRDs(t), filepath.Join(csiAddons, "deploy/controller/crds.yaml"))...)
	kc := kubernetes.NewForConfigOrDie(cp.Admin)
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "storage"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pod Security admission judges pods, not the templates of Deployments: the controllers'
	// pod templates are created as Pods here
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "restricted",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res := newResources(kc.Discovery(), dyn)
	for _, c := range []struct {
		name   string
		values []string
	}{
		{"minimal", nil},
		{"everything", []string{"rbd.storageClass.create=true", "rbd.storageClass.pool=rbd", "rbd.snapshotClass.create=true",
			"rbd.snapshotMetadata.enabled=true", "cephfs.storageClass.create=true", "cephfs.storageClass.fsName=fs",
			"cephfs.snapshotClass.create=true", "cephfs.csiAddons.enabled=true", "rbd.csiAddons.enabled=true", "rbd.storageClass.isDefault=true",
			"groupSnapshots.enabled=true", "rbd.groupSnapshotClass.create=true", "rbd.groupSnapshotClass.isDefault=true", "cephfs.groupSnapshotClass.create=true",
			"controller.hostNetwork=true", "cluster.cephFS.subvolumeGroup=k8s", "rbd.storageClass.mountOptions={discard}",
			"controller.resources.requests.cpu=100m", "node.nodeSelector.storage=yes"}},
		{"rbd only, existing secrets", []string{"rbd.enabled=true", "cephfs.enabled=false", "cephUser.existingSecret=ceph-user",
			"cephUser.key=", "rbd.snapshotMetadata.enabled=true", "rbd.snapshotMetadata.tls.existingSecret=cbt-tls", "controller.leaderElection.enabled=false", "controller.replicas=1",
			"rbd.csiAddons.enabled=true"}},
		{"cephfs only", []string{"rbd.enabled=false", "cephfs.storageClass.create=true", "cephfs.storageClass.fsName=fs",
			"cephfs.storageClass.backingSnapshot=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.Contains(strings.Join(c.values, ","), "tls.existingSecret=cbt-tls") {
				// the chart reads the CA of an existing TLS Secret (lookup needs a live cluster,
				// hence install --dry-run=server below)
				crt, key := cp.CA.Issue(t, "cbt")
				_, err := kc.CoreV1().Secrets("storage").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cbt-tls"},
					Type: corev1.SecretTypeTLS, Data: map[string][]byte{"ca.crt": cp.CA.CertPEM, "tls.crt": crt, "tls.key": key}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
			}
			args := append([]string{"install", "r", "charts/monoceph", "--namespace", "storage", "--dry-run=server",
				"--kubeconfig", cp.Kubeconfig(t, cp.AdminToken)}, withMinimal(c.values...)...)
			out, err := helmCmd(t, args...)
			if err != nil {
				t.Fatalf("helm install --dry-run=server: %v", err)
			}
			// the dry run prints the release; its manifest follows "MANIFEST:" until "NOTES:"
			manifest := out
			if i := strings.Index(manifest, "MANIFEST:"); i >= 0 {
				manifest = manifest[i+len("MANIFEST:"):]
			}
			if i := strings.Index(manifest, "NOTES:"); i >= 0 {
				manifest = manifest[:i]
			}
			n := 0
			for _, o := range kubetest.Objects(t, "helm install --dry-run=server", []byte(manifest)) {
				if _, err := res.of(t, o, "storage").Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
					t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
				}
				n++
				if hostNet, _, _ := unstructured.NestedBool(o.Object, "spec", "template", "spec", "hostNetwork"); o.GetKind() == "Deployment" && !hostNet {
					checkRestricted(t, kc, o)
				}
			}
			if n < 10 {
				t.Fatalf("only %d objects rendered:\n%s", n, out)
			}
			t.Logf("%d objects valid", n)
		})
	}
	// the pre-upgrade hook exists only in an upgrade's manifest
	t.Run("upgrade hook", func(t *testing.T) {
		args := append([]string{"template", "r", "charts/monoceph", "--namespace", "storage", "--is-upgrade",
			"--show-only", "templates/upgrade-hook.yaml"}, withMinimal("rbd.storageClass.create=true", "rbd.storageClass.pool=rbd")...)
		out, err := helmCmd(t, args...)
		if err != nil {
			t.Fatalf("helm template --is-upgrade: %v", err)
		}
		kinds := map[string]int{}
		for _, o := range kubetest.Objects(t, "helm template --is-upgrade", []byte(out)) {
			if _, err := res.of(t, o, "storage").Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
				t.Errorf("%s %s: %v", o.GetKind(), o.GetName(), err)
			}
			kinds[o.GetKind()]++
			if o.GetKind() == "Job" {
				checkRestricted(t, kc, o)
			}
		}
		if want := map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Job": 1}; fmt.Sprint(kinds) != fmt.Sprint(want) {
			t.Errorf("upgrade hook objects %v, want %v", kinds, want)
		}
	})
}

// checkRestricted creates the pod template of a Deployment or Job as a Pod (dry run) in a
// namespace that enforces the "restricted" Pod Security level: the controllers and the upgrade
// hook need no privilege at all.
func checkRestricted(t *testing.T, kc kubernetes.Interface, o *unstructured.Unstructured) {
	t.Helper()
	var tmpl corev1.PodTemplateSpec
	switch o.GetKind() {
	case "Deployment":
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
			t.Fatal(err)
		}
		tmpl = d.Spec.Template
	case "Job":
		var j batchv1.Job
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &j); err != nil {
			t.Fatal(err)
		}
		tmpl = j.Spec.Template
	default:
		t.Fatalf("%s %s has no pod template", o.GetKind(), o.GetName())
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: tmpl.Labels}, Spec: tmpl.Spec}
	if _, err := kc.CoreV1().Pods("restricted").Create(context.Background(), pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("%s %s: its pods are refused where Pod Security enforces restricted: %v", o.GetKind(), o.GetName(), err)
	}
}
