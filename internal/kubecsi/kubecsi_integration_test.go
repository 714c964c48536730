package kubecsi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/kubetest"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

func csiDriver(name string, attach bool, policy storagev1.FSGroupPolicy) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{TypeMeta: metav1.TypeMeta{Kind: "CSIDriver", APIVersion: "storage.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: owned(testRelease)},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: &attach, FSGroupPolicy: &policy}}
}

func storageClass(name string, params map[string]string, expand bool) *storagev1.StorageClass {
	return &storagev1.StorageClass{TypeMeta: metav1.TypeMeta{Kind: "StorageClass", APIVersion: "storage.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: owned(testRelease)}, Provisioner: "d.test", Parameters: params, AllowVolumeExpansion: &expand}
}

var testRelease = Release{Namespace: "ns", Name: "monoceph"}

// owned are the annotations Helm puts on an object of release r.
func owned(r Release) map[string]string {
	return map[string]string{"meta.helm.sh/release-name": r.Name, "meta.helm.sh/release-namespace": r.Namespace}
}

func toUnstructured(t *testing.T, o any) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestReplaceIfImmutable on a real API server: only a change of an immutable field replaces
// the installed object.
func TestReplaceIfImmutable(t *testing.T) {
	cp := kubetest.Start(t, kubetest.Options{})
	kc := kubernetes.NewForConfigOrDie(cp.Admin)
	dc := dynamic.NewForConfigOrDie(cp.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := map[string]string{"pool": "rbd"}
	newer := map[string]string{"pool": "rbd", "csi.storage.k8s.io/controller-publish-secret-name": "s"}
	for _, c := range []struct {
		name                string
		installed, want     *storagev1.StorageClass
		replaced, remaining bool
	}{
		{"class parameters change", storageClass("a", old, false), storageClass("a", newer, false), true, false},
		{"only allowVolumeExpansion changes", storageClass("b", old, false), storageClass("b", old, true), false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := kc.StorageV1().StorageClasses().Create(ctx, c.installed, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			replaced, err := ReplaceIfImmutable(ctx, dc, toUnstructured(t, c.want), testRelease)
			if err != nil || replaced != c.replaced {
				t.Fatalf("replaced %v, %v; want %v", replaced, err, c.replaced)
			}
			_, err = kc.StorageV1().StorageClasses().Get(ctx, c.want.Name, metav1.GetOptions{})
			if (err == nil) != c.remaining {
				t.Fatalf("after: %v; want remaining %v", err, c.remaining)
			}
		})
	}
	for _, c := range []struct {
		name                string
		installed, want     *storagev1.CSIDriver
		replaced, remaining bool
	}{
		{"attachRequired changes", csiDriver("a.test", false, storagev1.FileFSGroupPolicy), csiDriver("a.test", true, storagev1.FileFSGroupPolicy), true, false},
		{"only fsGroupPolicy changes", csiDriver("b.test", false, storagev1.FileFSGroupPolicy), csiDriver("b.test", false, storagev1.NoneFSGroupPolicy), false, true},
		{"nothing changes", csiDriver("c.test", true, storagev1.FileFSGroupPolicy), csiDriver("c.test", true, storagev1.FileFSGroupPolicy), false, true},
		{"not installed", nil, csiDriver("d.test", true, storagev1.FileFSGroupPolicy), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.installed != nil {
				if _, err := kc.StorageV1().CSIDrivers().Create(ctx, c.installed, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			replaced, err := ReplaceIfImmutable(ctx, dc, toUnstructured(t, c.want), testRelease)
			if err != nil || replaced != c.replaced {
				t.Fatalf("replaced %v, %v; want %v", replaced, err, c.replaced)
			}
			got, err := kc.StorageV1().CSIDrivers().Get(ctx, c.want.Name, metav1.GetOptions{})
			if remaining := err == nil; remaining != c.remaining || (err != nil && !apierrors.IsNotFound(err)) {
				t.Fatalf("after: %v, %v; want remaining %v", got, err, c.remaining)
			}
			if c.remaining && *got.Spec.FSGroupPolicy != *c.installed.Spec.FSGroupPolicy {
				t.Fatal("the dry run changed the object")
			}
		})
	}
	// another release's driver, or one of none, is an error naming its owner, and stays
	for _, c := range []struct {
		name, owner string
		annotations map[string]string
	}{
		{"another release's", "Helm release other/monoceph", owned(Release{Namespace: "other", Name: "monoceph"})},
		{"no release's", "no Helm release", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			installed := csiDriver("e.test", false, storagev1.FileFSGroupPolicy)
			installed.Annotations = c.annotations
			if _, err := kc.StorageV1().CSIDrivers().Create(ctx, installed, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = kc.StorageV1().CSIDrivers().Delete(ctx, "e.test", metav1.DeleteOptions{}) }()
			replaced, err := ReplaceIfImmutable(ctx, dc, toUnstructured(t, csiDriver("e.test", true, storagev1.FileFSGroupPolicy)), testRelease)
			if replaced || err == nil || !strings.Contains(err.Error(), c.owner) {
				t.Fatalf("replaced %v, %v; want an error naming %s", replaced, err, c.owner)
			}
			if _, err := kc.StorageV1().CSIDrivers().Get(ctx, "e.test", metav1.GetOptions{}); err != nil {
				t.Fatalf("the object of %s is gone: %v", c.owner, err)
			}
		})
	}
}

func TestCredentialsAndNodes(t *testing.T) {
	cp := kubetest.Start(t, kubetest.Options{})
	kc := kubernetes.NewForConfigOrDie(cp.Admin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "AQCDUQVrweHAFxAAkcm1wvIwZfJ6TxZfUDZyng=="
	for name, data := range map[string]map[string][]byte{
		"good": {ceph.SecretUserID: []byte("csi"), ceph.SecretUserKey: []byte(key)},
		"bad":  {ceph.SecretUserID: []byte("csi")},
	} {
		if _, err := kc.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := NewCredentials(kc, SecretRef{"default", "good"}).Secrets(ctx)
	if err != nil || s[ceph.SecretUserID] != "csi" || s[ceph.SecretUserKey] != key {
		t.Fatalf("good Secret: %v", err)
	}
	for _, name := range []string{"bad", "missing"} {
		if _, err := NewCredentials(kc, SecretRef{"default", name}).Secrets(ctx); err == nil {
			t.Fatalf("Secret %s gave credentials", name)
		}
	}
	for name, nodeID := range map[string]string{"n1": "n1", "host-2": "id-2"} {
		_, err := kc.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "d.test", NodeID: nodeID}, {Name: "other.test", NodeID: "x"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	nodes := NewCSINodes(kc, "d.test")
	for id, want := range map[string]bool{"n1": true, "id-2": true, "host-2": false, "x": false, "n9": false} {
		if got, err := nodes.NodeExists(ctx, id); err != nil || got != want {
			t.Errorf("NodeExists(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
}

func TestParseSecretRef(t *testing.T) {
	for in, ok := range map[string]bool{"ns/name": true, "name": false, "/name": false, "ns/": false, "a/b/c": false} {
		if _, err := ParseSecretRef(in); (err == nil) != ok {
			t.Errorf("ParseSecretRef(%q): %v", in, err)
		}
	}
}
