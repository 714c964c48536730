package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const userNS = "app"

// claim describes a PVC the test creates.
type claim struct {
	name, class, size string
	mode              corev1.PersistentVolumeAccessMode
	fromSnapshot      string
	labels            map[string]string
	attrClass         string // VolumeAttributesClass
	fromClaim         string // a PVC-PVC clone
	block             bool   // volumeMode Block
}

// createPVC creates a claim and waits until the provisioner and the PV controller bound it.
func (e *env) createPVC(c claim) *corev1.PersistentVolume {
	e.t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: userNS, Labels: c.labels},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: &c.class,
			AccessModes:      []corev1.PersistentVolumeAccessMode{c.mode},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(c.size)}},
		},
	}
	if c.block {
		mode := corev1.PersistentVolumeBlock
		pvc.Spec.VolumeMode = &mode
	}
	if c.attrClass != "" {
		pvc.Spec.VolumeAttributesClassName = &c.attrClass
	}
	if c.fromSnapshot != "" {
		group := snapv1.GroupName
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: &group, Kind: "VolumeSnapshot", Name: c.fromSnapshot}
	}
	if c.fromClaim != "" {
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: c.fromClaim}
	}
	if _, err := e.kc.CoreV1().PersistentVolumeClaims(userNS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	e.waitFor(90*time.Second, "PVC "+c.name+" bound", func() (bool, string) {
		got, err := e.kc.CoreV1().PersistentVolumeClaims(userNS).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if got.Status.Phase != corev1.ClaimBound {
			return false, fmt.Sprintf("phase %q; %s", got.Status.Phase, e.eventsOf(got.Name))
		}
		pv, err = e.kc.CoreV1().PersistentVolumes().Get(ctx, got.Spec.VolumeName, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return pv
}

// eventsOf summarises the events about one object.
func (e *env) eventsOf(name string) string {
	list, err := e.kc.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var msgs []string
	for _, ev := range list.Items {
		msgs = append(msgs, ev.Reason+": "+ev.Message)
	}
	return "events: " + strings.Join(msgs, " | ")
}

// deletePVC deletes a claim and waits until its PV is gone (the driver deleted the volume).
func (e *env) deletePVC(name string, pv *corev1.PersistentVolume) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.kc.CoreV1().PersistentVolumeClaims(userNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(60*time.Second, "PV "+pv.Name+" deleted", func() (bool, string) {
		_, err := e.kc.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v; %s", err, e.eventsOf(pv.Name))
	})
}

// rbdImage is the pool/namespace/image spec of an RBD PV.
func (e *env) rbdImage(pv *corev1.PersistentVolume) string {
	e.t.Helper()
	id, err := volid.ParseRBDVolume(pv.Spec.CSI.VolumeHandle)
	if err != nil {
		e.t.Fatalf("PV %s handle: %v", pv.Name, err)
	}
	spec := e.ceph.RBDPool + "/"
	if id.Namespace != "" {
		spec += id.Namespace + "/"
	}
	return spec + rbdname.Image(id.UID)
}

// rbdSize is the size of an RBD image in bytes, or an error when it does not exist.
func (e *env) rbdSize(spec string) (int64, error) {
	out, err := e.cephCmd("rbd", "info", "--format", "json", spec)
	if err != nil {
		return 0, err
	}
	var info struct {
		Size int64 `json:"size"`
	}
	err = json.Unmarshal([]byte(out), &info)
	return info.Size, err
}

// subvolume is the group and name of a CephFS PV's subvolume, from its rootPath
// (/volumes/<group>/<subvolume>/<uuid>).
func (e *env) subvolume(pv *corev1.PersistentVolume) (group, name string) {
	e.t.Helper()
	p := strings.Split(strings.Trim(pv.Spec.CSI.VolumeAttributes["rootPath"], "/"), "/")
	if len(p) < 3 || p[0] != "volumes" {
		e.t.Fatalf("PV %s: rootPath %q", pv.Name, pv.Spec.CSI.VolumeAttributes["rootPath"])
	}
	return p[1], p[2]
}

// subvolumeQuota is a subvolume's quota in bytes, or an error when it does not exist.
func (e *env) subvolumeQuota(group, name string) (int64, error) {
	out, err := e.cephCmd("ceph", "fs", "subvolume", "info", e.ceph.FSName, name, "--group_name", group, "--format", "json")
	if err != nil {
		return 0, err
	}
	var info struct {
		BytesQuota json.RawMessage `json:"bytes_quota"`
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return 0, err
	}
	var q int64
	if err := json.Unmarshal(info.BytesQuota, &q); err != nil {
		return 0, fmt.Errorf("bytes_quota %s", info.BytesQuota)
	}
	return q, nil
}

// subvolumeSnapshots counts the Ceph snapshots of a subvolume (which may be removed with its
// snapshots retained).
func (e *env) subvolumeSnapshots(group, name string) int {
	e.t.Helper()
	out, err := e.cephCmd("ceph", "fs", "subvolume", "snapshot", "ls", e.ceph.FSName, name, "--group_name", group, "--format", "json")
	if err != nil {
		e.t.Fatal(err)
	}
	var snaps []map[string]any
	if err := json.Unmarshal([]byte(out), &snaps); err != nil {
		e.t.Fatalf("snapshot ls: %v: %s", err, out)
	}
	return len(snaps)
}

// snapshot creates a VolumeSnapshot of a claim and waits until it is ready.
func (e *env) snapshot(name, pvc, class string) *snapv1.VolumeSnapshot {
	e.t.Helper()
	ctx := context.Background()
	_, err := e.snap.SnapshotV1().VolumeSnapshots(userNS).Create(ctx, &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: userNS},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: &pvc}, VolumeSnapshotClassName: &class},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var vs *snapv1.VolumeSnapshot
	e.waitFor(90*time.Second, "VolumeSnapshot "+name+" ready", func() (bool, string) {
		vs, err = e.snap.SnapshotV1().VolumeSnapshots(userNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if vs.Status == nil || vs.Status.ReadyToUse == nil || !*vs.Status.ReadyToUse || vs.Status.BoundVolumeSnapshotContentName == nil {
			msg := ""
			if vs.Status != nil && vs.Status.Error != nil && vs.Status.Error.Message != nil {
				msg = *vs.Status.Error.Message
			}
			return false, fmt.Sprintf("status %+v %s; %s", vs.Status, msg, e.eventsOf(name))
		}
		return true, ""
	})
	return vs
}

// snapshotHandle is the CSI snapshot ID behind a ready VolumeSnapshot.
func (e *env) snapshotHandle(vs *snapv1.VolumeSnapshot) string {
	e.t.Helper()
	c, err := e.snap.SnapshotV1().VolumeSnapshotContents().Get(context.Background(), *vs.Status.BoundVolumeSnapshotContentName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if c.Status == nil || c.Status.SnapshotHandle == nil {
		e.t.Fatalf("content %s has no snapshot handle", c.Name)
	}
	return *c.Status.SnapshotHandle
}

// deleteSnapshot deletes a VolumeSnapshot and waits until its content is gone.
func (e *env) deleteSnapshot(vs *snapv1.VolumeSnapshot) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.snap.SnapshotV1().VolumeSnapshots(userNS).Delete(ctx, vs.Name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	content := *vs.Status.BoundVolumeSnapshotContentName
	e.waitFor(60*time.Second, "VolumeSnapshotContent "+content+" deleted", func() (bool, string) {
		_, err := e.snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, content, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v; %s", err, e.eventsOf(content))
	})
}

// expand raises a claim's request and waits until the PV shows the new capacity.
func (e *env) expand(name, size string) *corev1.PersistentVolume {
	e.t.Helper()
	ctx := context.Background()
	pvc, err := e.kc.CoreV1().PersistentVolumeClaims(userNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	want := resource.MustParse(size)
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = want
	if _, err := e.kc.CoreV1().PersistentVolumeClaims(userNS).Update(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	var pv *corev1.PersistentVolume
	e.waitFor(60*time.Second, "PV of "+name+" at "+size, func() (bool, string) {
		pv, err = e.kc.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := pv.Spec.Capacity[corev1.ResourceStorage]
		return got.Cmp(want) >= 0, fmt.Sprintf("capacity %s; %s", got.String(), e.eventsOf(name))
	})
	return pv
}
