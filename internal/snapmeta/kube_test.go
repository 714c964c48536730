package snapmeta

import (
	"context"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapfake "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned/fake"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSnapshotBackReference: a VolumeSnapshot resolves to its content's snapshot only when the
// content is bound back to it (namespace, name and, once bound, UID): a status pointing at
// another namespace's content reads nothing.
func TestSnapshotBackReference(t *testing.T) {
	const driver, handle = "rbd.test", "rs1:c:1::abcdefghijklmnop:abcdefghijklmnop"
	for _, c := range []struct {
		name string
		ref  corev1.ObjectReference
		want codes.Code
	}{
		{"bound to it", corev1.ObjectReference{Namespace: "ns", Name: "snap", UID: "uid-1"}, codes.OK},
		{"bound to it, uid not recorded", corev1.ObjectReference{Namespace: "ns", Name: "snap"}, codes.OK},
		{"another namespace's", corev1.ObjectReference{Namespace: "other", Name: "snap", UID: "uid-1"}, codes.FailedPrecondition},
		{"another snapshot's", corev1.ObjectReference{Namespace: "ns", Name: "other", UID: "uid-1"}, codes.FailedPrecondition},
		{"an earlier snapshot of that name", corev1.ObjectReference{Namespace: "ns", Name: "snap", UID: "uid-0"}, codes.FailedPrecondition},
	} {
		t.Run(c.name, func(t *testing.T) {
			content, class, ready := "content-1", "cls", true
			h := handle
			vs := &snapv1.VolumeSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "snap", UID: types.UID("uid-1")},
				Spec:   snapv1.VolumeSnapshotSpec{VolumeSnapshotClassName: &class},
				Status: &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &content, ReadyToUse: &ready}}
			vsc := &snapv1.VolumeSnapshotContent{ObjectMeta: metav1.ObjectMeta{Name: content},
				Spec:   snapv1.VolumeSnapshotContentSpec{Driver: driver, VolumeSnapshotRef: c.ref},
				Status: &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &h}}
			cls := &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Driver: driver,
				Parameters: map[string]string{paramSecretName: "ceph", paramSecretNamespace: "ceph"}}
			sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ceph", Name: "ceph"}, Data: map[string][]byte{"userID": []byte("u")}}
			//lint:ignore SA1019 the snapshot client's fake has no NewClientset (its apply configurations are not generated)
			k := &APIServer{Client: fake.NewClientset(sec), Snapshots: snapfake.NewSimpleClientset(vs, vsc, cls), Driver: driver}
			got, secrets, err := k.Snapshot(context.Background(), "ns", "snap")
			if status.Code(err) != c.want {
				t.Fatalf("Snapshot: %v, want %v", err, c.want)
			}
			if c.want == codes.OK && (got != handle || secrets["userID"] != "u") {
				t.Fatalf("Snapshot = %q, %v", got, secrets)
			}
		})
	}
}
