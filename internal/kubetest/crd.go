package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ApplyCRDs server-side applies every CustomResourceDefinition in files (YAML, several
// documents each allowed; documents of other kinds are ignored) and waits until each is
// Established and its served versions list.
func (cp *ControlPlane) ApplyCRDs(t testing.TB, files ...string) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cp.Admin)
	var crds []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range Objects(t, f, b) {
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			// Apply rather than create: tests may install the same CRD twice (say, once from
			// the modules and once from a chart) and mean the same thing.
			if _, err := dyn.Resource(crdGVR).Apply(context.Background(), u.GetName(), u,
				metav1.ApplyOptions{FieldManager: "kubetest", Force: true}); err != nil {
				t.Fatalf("apply CRD %s from %s: %v", u.GetName(), filepath.Base(f), err)
			}
			crds = append(crds, u)
		}
	}
	for _, u := range crds {
		name := u.GetName()
		cp.wait(t, 30*time.Second, "CRD "+name+" to be established", func(ctx context.Context) error {
			got, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("conditions %v", conds)
		})
		// Established can precede the handler serving every version by a moment; a test's
		// first request would then get a 404.
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
		for _, v := range versions {
			v, _ := v.(map[string]any)
			if served, _ := v["served"].(bool); !served {
				continue
			}
			version, _ := v["name"].(string)
			gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
			cp.wait(t, 30*time.Second, gvr.String()+" to be served", func(ctx context.Context) error {
				_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
				return err
			})
		}
	}
}

// Objects decodes the Kubernetes objects of a multi-document YAML stream (a manifest file, or
// what helm renders), skipping empty documents; source names it in failures.
func Objects(t testing.TB, source string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%s: %v\n%s", source, err, doc)
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// SnapshotCRDs returns the VolumeSnapshot, VolumeSnapshotContent, VolumeSnapshotClass, their
// VolumeGroupSnapshot counterparts and the SnapshotMetadataService CRD files shipped in the
// modules the main go.mod pins, so the installed schemas match the generated clients the code
// uses.
func SnapshotCRDs(t testing.TB) []string {
	t.Helper()
	root := mainModuleDir()
	var files []string
	for _, m := range []struct {
		module string
		names  []string
	}{
		{"github.com/kubernetes-csi/external-snapshotter/client/v8", []string{
			"snapshot.storage.k8s.io_volumesnapshotclasses.yaml", "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
			"snapshot.storage.k8s.io_volumesnapshots.yaml",
			// VolumeGroupSnapshots: served as v1 (and v1beta1, v1beta2) by v8.6.0, which its
			// controllers use
			"groupsnapshot.storage.k8s.io_volumegroupsnapshotclasses.yaml", "groupsnapshot.storage.k8s.io_volumegroupsnapshotcontents.yaml",
			"groupsnapshot.storage.k8s.io_volumegroupsnapshots.yaml"}},
		{"github.com/kubernetes-csi/external-snapshot-metadata/client", []string{"cbt.storage.k8s.io_snapshotmetadataservices.yaml"}},
	} {
		d := ModuleDir(t, root, m.module)
		for _, n := range m.names {
			files = append(files, filepath.Join(d, "config", "crd", n))
		}
	}
	return files
}

// mainModuleDir is the repository root when this source file is where it was compiled from,
// so a test binary run from elsewhere still resolves the main go.mod; otherwise (-trimpath)
// it is "", the current directory.
func mainModuleDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return ""
	}
	return root
}
