package inventory

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// contents is the VolumeSnapshotContent resource, read through the dynamic client so the
// inventory works (without snapshots) where the snapshot CRDs are not installed.
var contents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}

// ListKube reads the PVs and VolumeSnapshotContents of drivers, marking the PVs a
// VolumeAttachment attaches. Lists are paged by the API server (client-go's default: all).
func ListKube(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, drivers map[string]bool) ([]PV, error) {
	vas, err := kc.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list VolumeAttachments: %w", err)
	}
	attached := map[string]string{}
	for _, va := range vas.Items {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && drivers[va.Spec.Attacher] {
			attached[*pv] = va.Spec.NodeName
		}
	}
	list, err := kc.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list PersistentVolumes: %w", err)
	}
	var out []PV
	for _, pv := range list.Items {
		if pv.Spec.CSI == nil || !drivers[pv.Spec.CSI.Driver] {
			continue
		}
		p := PV{Name: pv.Name, Handle: pv.Spec.CSI.VolumeHandle, Phase: string(pv.Status.Phase)}
		if c := pv.Spec.ClaimRef; c != nil {
			p.ClaimRef = c.Namespace + "/" + c.Name
		}
		p.AttachedNode, p.Attached = attached[pv.Name]
		out = append(out, p)
	}
	if dc == nil {
		return out, nil
	}
	vscs, err := dc.Resource(contents).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return out, nil // no snapshot CRDs: no snapshots to join
	}
	if err != nil {
		return nil, fmt.Errorf("list VolumeSnapshotContents: %w", err)
	}
	for _, c := range vscs.Items {
		if d, _, _ := unstructured.NestedString(c.Object, "spec", "driver"); !drivers[d] {
			continue
		}
		h, _, _ := unstructured.NestedString(c.Object, "status", "snapshotHandle")
		if h == "" {
			h, _, _ = unstructured.NestedString(c.Object, "spec", "source", "snapshotHandle")
		}
		ns, _, _ := unstructured.NestedString(c.Object, "spec", "volumeSnapshotRef", "namespace")
		name, _, _ := unstructured.NestedString(c.Object, "spec", "volumeSnapshotRef", "name")
		out = append(out, PV{Name: c.GetName(), Handle: h, Snapshot: true, ClaimRef: ns + "/" + name})
	}
	return out, nil
}
