package nodefence

import (
	"testing"

	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
)

// TestSiteOf: the image and attachment object of a PV are found from monoceph's volume ID, or
// for a volume ceph-csi created, from its handle and the volume context its node stages by.
func TestSiteOf(t *testing.T) {
	const uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	mono := volid.RBDVolume{ClusterID: "c1", PoolID: 3, Namespace: "ns", UID: "abcdefghijklmnop"}.String()
	handle := volid.Handle{ClusterID: "rook-ceph", LocationID: 3, UUID: uuid}.String()
	csiContext := map[string]string{"clusterID": "rook-ceph", "pool": "replicapool", "radosNamespace": "tenant", "imageName": "csi-vol-" + uuid}
	for _, c := range []struct {
		name   string
		handle string
		attrs  map[string]string
		want   site
		ok     bool
	}{
		{"monoceph", mono, nil, site{clusterID: "c1", poolID: 3, namespace: "ns", image: "csi-vol-abcdefghijklmnop", key: "abcdefghijklmnop"}, true},
		{"ceph-csi", handle, csiContext, site{clusterID: "rook-ceph", pool: "replicapool", namespace: "tenant", image: "csi-vol-" + uuid, key: uuid}, true},
		{"ceph-csi without a volume context", handle, nil, site{}, false},
		{"ceph-csi with a bad image name", handle, map[string]string{"clusterID": "rook-ceph", "pool": "replicapool", "imageName": "-x"}, site{}, false},
		{"pre-provisioned", "my-image", csiContext, site{}, false},
	} {
		pv := &corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{VolumeHandle: c.handle, VolumeAttributes: c.attrs}}}}
		got, ok := siteOf(pv)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: siteOf = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
