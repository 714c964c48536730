package inventory

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1 "github.com/monoceph/monoceph/api/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestListKube: only the drivers' PVs and contents are read; a VolumeAttachment marks its PV;
// a pre-provisioned content's handle is read from its spec.
func TestListKube(t *testing.T) {
	pv := func(name, driver, handle string, phase corev1.PersistentVolumePhase) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}},
				ClaimRef: &corev1.ObjectReference{Namespace: "apps", Name: "c-" + name}},
			Status: corev1.PersistentVolumeStatus{Phase: phase}}
	}
	pvName := "pv-a"
	kc := fake.NewClientset(pv("pv-a", "rbd.monoceph.io", "h-a", corev1.VolumeBound), pv("pv-b", "rbd.monoceph.io", "h-b", corev1.VolumeReleased),
		pv("pv-other", "ebs.csi.aws.com", "h-o", corev1.VolumeBound),
		&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"}, Spec: storagev1.VolumeAttachmentSpec{Attacher: "rbd.monoceph.io", NodeName: "n1",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}})
	content := func(name, driver string, status bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotContent",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"driver": driver, "volumeSnapshotRef": map[string]any{"namespace": "apps", "name": "s-" + name}}}}
		if status {
			u.Object["status"] = map[string]any{"snapshotHandle": "h-" + name}
		} else {
			u.Object["spec"].(map[string]any)["source"] = map[string]any{"snapshotHandle": "h-" + name}
		}
		return u
	}
	dc := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{contents: "VolumeSnapshotContentList"},
		content("sc-1", "rbd.monoceph.io", true), content("sc-2", "rbd.monoceph.io", false), content("sc-3", "other", true))
	got, err := ListKube(context.Background(), kc, dc, map[string]bool{"rbd.monoceph.io": true})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, fmt.Sprintf("%s:%s:%s:%s:%v:%s:%v", p.Name, p.Handle, p.Phase, p.ClaimRef, p.Attached, p.AttachedNode, p.Snapshot))
	}
	want := "pv-a:h-a:Bound:apps/c-pv-a:true:n1:false pv-b:h-b:Released:apps/c-pv-b:false::false " +
		"sc-1:h-sc-1::apps/s-sc-1:false::true sc-2:h-sc-2::apps/s-sc-2:false::true"
	if strings.Join(lines, " ") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(lines, " "), want)
	}
}

// TestPlacesTopologyPools: a class that places its volumes by topology has no pool of its own;
// its volumes are in the pools of its topologyConstrainedPools, which are scanned too.
func TestPlacesTopologyPools(t *testing.T) {
	sc := func(name, driver string, params map[string]string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: driver, Parameters: params}
	}
	kc := fake.NewClientset(
		sc("plain", "rbd.monoceph.io", map[string]string{"clusterID": "c", "pool": "rbd"}),
		sc("zoned", "rbd.monoceph.io", map[string]string{"clusterID": "c", "topologyConstrainedPools": `[` +
			`{"poolName":"z1","domainSegments":[{"domainLabel":"zone","value":"z1"}]},` +
			`{"poolName":"z2","domainSegments":[{"domainLabel":"zone","value":"z2"}]}]`}),
		sc("other driver", "ebs.csi.aws.com", map[string]string{"clusterID": "c", "pool": "elsewhere"}),
	)
	places, err := Places(context.Background(), kc, v1.ClusterMap{{ClusterID: "c"}}, map[string]bool{"rbd.monoceph.io": true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range places {
		got = append(got, p.Pool)
	}
	if want := "rbd z1 z2"; strings.Join(got, " ") != want {
		t.Fatalf("places %v, want %s", got, want)
	}
}
