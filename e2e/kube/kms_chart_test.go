package kube

import (
	"context"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/kubetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Tests of the chart's KMS settings (rbd.kms): the configuration file the RBD plugins are
// pointed at is rendered, mounted and parsed back by the driver's own parser.

// chartObjects is one helm template output, by kind and name ("Deployment/r-monoceph-rbd-controller").
type chartObjects map[string]*unstructured.Unstructured

// renderedObjects is helm template of the chart with the minimal values, the values file
// values (unless empty) and extra.
func renderedObjects(t *testing.T, values string, extra ...string) chartObjects {
	t.Helper()
	args := []string{"template", "r", "charts/monoceph"}
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	out, err := helmCmd(t, append(args, withMinimal(extra...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	r := chartObjects{}
	for _, o := range kubetest.Objects(t, "helm template", []byte(out)) {
		r[o.GetKind()+"/"+o.GetName()] = o
	}
	return r
}

// renderedAs is the object key of r as a T.
func renderedAs[T any](t *testing.T, r chartObjects, key string) *T {
	t.Helper()
	o, ok := r[key]
	if !ok {
		t.Fatalf("no %s rendered", key)
	}
	v := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

// kmsFile follows the monoceph container's --kms-config flag to the file's content: its mount,
// the pod's volume, the ConfigMap and the key behind that file. ok is false without the flag.
func kmsFile(t *testing.T, r chartObjects, what string, pod corev1.PodSpec) (content string, cm string, ok bool) {
	t.Helper()
	c := container(t, pod, "monoceph")
	var file string
	for _, a := range c.Args {
		if f, found := strings.CutPrefix(a, "--kms-config="); found {
			file = f
		}
	}
	if file == "" {
		return "", "", false
	}
	var vol string
	for _, m := range c.VolumeMounts {
		if path.Dir(file) == path.Clean(m.MountPath) {
			if !m.ReadOnly {
				t.Errorf("%s mounts %s writable", what, m.MountPath)
			}
			vol = m.Name
		}
	}
	if vol == "" {
		t.Fatalf("%s: --kms-config=%s is in no mount of the container", what, file)
	}
	j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
	if j < 0 || pod.Volumes[j].ConfigMap == nil {
		t.Fatalf("%s: volume %s of --kms-config=%s is no ConfigMap", what, vol, file)
	}
	src := pod.Volumes[j].ConfigMap
	key := path.Base(file)
	if len(src.Items) > 0 {
		k := slices.IndexFunc(src.Items, func(it corev1.KeyToPath) bool { return it.Path == path.Base(file) })
		if k < 0 {
			t.Fatalf("%s: ConfigMap %s has no item at %s", what, src.Name, path.Base(file))
		}
		key = src.Items[k].Key
	}
	if o, ok := r["ConfigMap/"+src.Name]; ok {
		content, _, _ = unstructured.NestedString(o.Object, "data", key)
		if content == "" {
			t.Fatalf("%s: ConfigMap %s has no key %s", what, src.Name, key)
		}
	}
	return content, src.Name + "/" + key, true
}

// kmsPods are the pod specs of the controllers and node plugins, by what they are.
func kmsPods(t *testing.T, r chartObjects) map[string]corev1.PodSpec {
	t.Helper()
	return map[string]corev1.PodSpec{
		"rbd controller":    renderedAs[appsv1.Deployment](t, r, "Deployment/r-monoceph-rbd-controller").Spec.Template.Spec,
		"rbd node plugin":   renderedAs[appsv1.DaemonSet](t, r, "DaemonSet/r-monoceph-rbd-node").Spec.Template.Spec,
		"cephfs controller": renderedAs[appsv1.Deployment](t, r, "Deployment/r-monoceph-cephfs-controller").Spec.Template.Spec,
		"cephfs node":       renderedAs[appsv1.DaemonSet](t, r, "DaemonSet/r-monoceph-cephfs-node").Spec.Template.Spec,
	}
}

// secretRules are the rules of every Role and ClusterRole that reach Secrets.
func secretRules(t *testing.T, r chartObjects) map[string][]rbacv1.PolicyRule {
	t.Helper()
	out := map[string][]rbacv1.PolicyRule{}
	for key, o := range r {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		for _, rule := range renderedAs[rbacv1.Role](t, r, key).Rules {
			if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") {
				out[key] = append(out[key], rule)
			}
		}
	}
	return out
}

// TestChartKMSConfig: rbd.kms.config, written as the README's values example (an entry as an
// object and one as ceph-csi's ConfigMap string), reaches the RBD controller and node plugins
// as the file --kms-config names, mounted read-only, and the driver's parser reads the entries
// back; CephFS pods get none; rbd.kms.secretNames become a rule by name only.
func TestChartKMSConfig(t *testing.T) {
	r := renderedObjects(t, `rbd:
  kms:
    config:
      per-volume-keys: {encryptionKMSType: metadata}
      vault-kv: {encryptionKMSType: vaulttokens, vaultAddress: "https://vault:8200", vaultBackendPath: secret/}
      vault-kms: '{"encryptionKMSType":"vaulttransit","vaultAddress":"https://vault:8200","vaultTransitKey":"ceph-csi"}'
    secretNames: [tenant-a, tenant-a]
`)
	want := map[string]string{"per-volume-keys": kms.TypeMetadata, "vault-kv": kms.TypeVaultTokens, "vault-kms": kms.TypeVaultTransit}
	for what, pod := range kmsPods(t, r) {
		content, cm, ok := kmsFile(t, r, what, pod)
		if strings.HasPrefix(what, "cephfs") {
			if ok {
				t.Errorf("%s is given a KMS configuration (%s): CephFS has no encryption", what, cm)
			}
			continue
		}
		if !ok {
			t.Errorf("%s has no --kms-config", what)
			continue
		}
		c, err := kms.Parse([]byte(content))
		if err != nil {
			t.Fatalf("%s: the driver refuses its KMS configuration (%s): %v\n%s", what, cm, err, content)
		}
		if ids := c.IDs(); !slices.Equal(ids, []string{"per-volume-keys", "vault-kms", "vault-kv"}) {
			t.Errorf("%s: KMS IDs %v", what, ids)
		}
		for id, typ := range want {
			if got, err := c.Provider(id); err != nil || got != typ {
				t.Errorf("%s: KMS %s is %q (%v), want %q", what, id, got, err, typ)
			}
		}
	}
	if _, ok := renderedAs[appsv1.DaemonSet](t, r, "DaemonSet/r-monoceph-rbd-node").Spec.Template.Annotations["checksum/kms"]; !ok {
		t.Error("the RBD node plugin's pods do not change with the KMS configuration they read at start")
	}

	rules := secretRules(t, r)
	var names []string
	for key, rs := range rules {
		for _, rule := range rs {
			if len(rule.ResourceNames) == 0 {
				t.Errorf("%s reaches every Secret: %+v", key, rule)
			}
			if key == "Role/r-monoceph-rbd-controller" {
				names = append(names, rule.ResourceNames...)
			}
		}
	}
	if !slices.Contains(names, "tenant-a") {
		t.Errorf("the RBD controller may read Secrets %v, want tenant-a among them", names)
	}
	if n := slices.Index(names, "tenant-a"); slices.Contains(names[n+1:], "tenant-a") {
		t.Errorf("tenant-a listed twice: %v", names)
	}
	for key, rs := range rules {
		for _, rule := range rs {
			if key != "Role/r-monoceph-rbd-controller" && slices.Contains(rule.ResourceNames, "tenant-a") {
				t.Errorf("%s may read tenant-a too", key)
			}
		}
	}
}

// TestChartKMSNone: without rbd.kms nothing is rendered for it: no flag, no ConfigMap, no rule.
func TestChartKMSNone(t *testing.T) {
	r := renderedObjects(t, "")
	for what, pod := range kmsPods(t, r) {
		if _, cm, ok := kmsFile(t, r, what, pod); ok {
			t.Errorf("%s is given a KMS configuration (%s)", what, cm)
		}
	}
	if _, ok := r["ConfigMap/r-monoceph-kms"]; ok {
		t.Error("ConfigMap r-monoceph-kms rendered without rbd.kms.config")
	}
}

// TestChartKMSExistingConfigMap: a ConfigMap made outside the chart (ceph-csi's
// ceph-csi-encryption-kms-config) is mounted with its key as the file --kms-config names.
func TestChartKMSExistingConfigMap(t *testing.T) {
	r := renderedObjects(t, "", "rbd.kms.existingConfigMap=ceph-csi-encryption-kms-config", "rbd.kms.existingConfigMapKey=kms.json")
	for _, what := range []string{"rbd controller", "rbd node plugin"} {
		if _, cm, ok := kmsFile(t, r, what, kmsPods(t, r)[what]); !ok || cm != "ceph-csi-encryption-kms-config/kms.json" {
			t.Errorf("%s reads %q (%v), want ceph-csi-encryption-kms-config/kms.json", what, cm, ok)
		}
	}
	if _, ok := r["ConfigMap/r-monoceph-kms"]; ok {
		t.Error("ConfigMap r-monoceph-kms rendered beside an existing one")
	}
}

// TestChartKMSRejectsBadValues: what the driver would refuse at start stops the install,
// naming the field.
func TestChartKMSRejectsBadValues(t *testing.T) {
	for _, c := range []struct{ name, set, wantErr string }{
		{"entry without a provider", "rbd.kms.config.a.vaultAddress=x", "at '/rbd/kms/config/a'"},
		{"reserved KMS ID", "rbd.kms.config.default.encryptionKMSType=metadata", "invalid propertyName 'default'"},
		{"entry that is a number", "rbd.kms.config.a=1", "at '/rbd/kms/config/a'"},
		{"both sources", "rbd.kms.config.a.encryptionKMSType=metadata,rbd.kms.existingConfigMap=x", "rbd.kms: set config or existingConfigMap, not both"},
		{"secret name that is no name", "rbd.kms.secretNames={A_B}", "at '/rbd/kms/secretNames/0'"},
		{"misspelt key", "rbd.kms.configs.a.encryptionKMSType=metadata", "'configs' not allowed"},
		{"empty provider", "rbd.kms.config.a.encryptionKMSType=", "at '/rbd/kms/config/a'"},
		{"empty KMS_PROVIDER", "rbd.kms.config.a.KMS_PROVIDER=", "at '/rbd/kms/config/a'"},
		{"provider that is a number", "rbd.kms.config.a.encryptionKMSType=1", "at '/rbd/kms/config/a'"},
	} {
		t.Run(c.name, func(t *testing.T) { checkRejected(t, c.set, c.wantErr) })
	}
	// string entries (ceph-csi's ConfigMap form), which the schema cannot look into
	for _, c := range []struct{ name, entry, wantErr string }{
		{"string that is no JSON", `not json`, "rbd.kms.config.a: the string does not hold a JSON object"},
		{"string holding a list", `["metadata"]`, "rbd.kms.config.a: the string does not hold a JSON object"},
		{"string without a provider", `{"vaultAddress":"https://vault:8200"}`, "rbd.kms.config.a: names no provider (encryptionKMSType)"},
		{"string with an empty provider", `{"encryptionKMSType":""}`, "rbd.kms.config.a: encryptionKMSType: want a provider name"},
		{"string with an empty KMS_PROVIDER", `{"KMS_PROVIDER":""}`, "rbd.kms.config.a: KMS_PROVIDER: want a provider name"},
		{"string with a provider that is a number", `{"encryptionKMSType":1}`, "rbd.kms.config.a: encryptionKMSType: want a provider name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte("rbd:\n  kms:\n    config:\n      a: '"+c.entry+"'\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := helmCmd(t, append([]string{"template", "x", "charts/monoceph", "-f", f}, withMinimal()...)...)
			if err == nil {
				t.Fatalf("entry %s rendered:\n%.300s", c.entry, out)
			}
			if !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("entry %s: %v; want it to name %q", c.entry, err, c.wantErr)
			}
		})
	}
}

// TestChartKMSChecksum: the RBD node plugin's pods change with the KMS configuration they read
// at start, and not with rbd.kms.secretNames, which only the controller's sidecars use.
func TestChartKMSChecksum(t *testing.T) {
	sum := func(extra ...string) string {
		t.Helper()
		r := renderedObjects(t, "", extra...)
		return renderedAs[appsv1.DaemonSet](t, r, "DaemonSet/r-monoceph-rbd-node").Spec.Template.Annotations["checksum/kms"]
	}
	base := sum("rbd.kms.config.a.encryptionKMSType=metadata", "rbd.kms.secretNames={tenant-a}")
	if base == "" {
		t.Fatal("no checksum/kms")
	}
	if got := sum("rbd.kms.config.a.encryptionKMSType=metadata", "rbd.kms.secretNames={tenant-a,tenant-b}"); got != base {
		t.Errorf("another secretNames changes checksum/kms: %s, was %s", got, base)
	}
	if got := sum("rbd.kms.config.a.encryptionKMSType=vaulttokens", "rbd.kms.secretNames={tenant-a}"); got == base {
		t.Errorf("another config leaves checksum/kms %s", got)
	}
	if a, b := sum("rbd.kms.existingConfigMap=x"), sum("rbd.kms.existingConfigMap=x", "rbd.kms.existingConfigMapKey=k.json"); a == b {
		t.Errorf("another existingConfigMapKey leaves checksum/kms %s", a)
	}
}

// TestChartKMSObjectsValidOnAPIServer creates what rbd.kms changes (the ConfigMap, the RBD
// controller and node plugin, the Role) on a real kube-apiserver as a server-side dry run with
// strict field validation.
func TestChartKMSObjectsValidOnAPIServer(t *testing.T) {
	r := renderedObjects(t, "", "rbd.kms.config.a.encryptionKMSType=metadata", "rbd.kms.secretNames={tenant-a}")
	cp := kubetest.Start(t, kubetest.Options{})
	res := newResources(kubernetes.NewForConfigOrDie(cp.Admin).Discovery(), dynamic.NewForConfigOrDie(cp.Admin))
	for _, key := range []string{"ConfigMap/r-monoceph-kms", "Deployment/r-monoceph-rbd-controller", "DaemonSet/r-monoceph-rbd-node",
		"Role/r-monoceph-rbd-controller"} {
		o, ok := r[key]
		if !ok {
			t.Fatalf("no %s rendered", key)
		}
		if _, err := res.of(t, o, "default").Create(context.Background(), o,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
}
