package nodefence

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSessionAttributed: a session is the node's only if monoceph could have made it, whatever
// it announces (issue 26, item 3).
func TestSessionAttributed(t *testing.T) {
	grants := []grant{{user: "node-user", root: "/volumes/csi/v1/uuid"}, {user: "other-stage", root: "/volumes/static"}}
	for _, c := range []struct {
		name string
		s    session
		want bool
	}{
		{"ceph-fuse of the node at a PV's root", session{node: "n1", user: "node-user", root: "/volumes/csi/v1/uuid"}, true},
		{"under a PV's root (a shallow volume's .snap)", session{node: "n1", user: "node-user", root: "/volumes/csi/v1/uuid/.snap/s"}, true},
		{"second PV's user and root", session{node: "n1", user: "other-stage", root: "/volumes/static/x"}, true},
		{"kernel client: hostname, no root", session{host: "n1", user: "node-user"}, true},
		{"another node", session{node: "n2", user: "node-user", root: "/volumes/csi/v1/uuid"}, false},
		{"node ID wins over hostname", session{node: "n2", host: "n1", user: "node-user", root: "/volumes/csi/v1/uuid"}, false},
		{"a user of no PV announcing the node", session{node: "n1", user: "intruder", root: "/volumes/csi/v1/uuid"}, false},
		{"unfiltered listing: user unknown", session{node: "n1", root: "/volumes/csi/v1/uuid"}, false},
		{"the node's user, root above the PV", session{node: "n1", user: "node-user", root: "/volumes/csi"}, false},
		{"the node's user, filesystem root", session{node: "n1", user: "node-user", root: "/"}, false},
		{"the node's user, a sibling with the PV's name as prefix", session{node: "n1", user: "node-user", root: "/volumes/csi/v1/uuid2"}, false},
		{"the node's user, another PV's root", session{node: "n1", user: "node-user", root: "/volumes/static"}, false},
		{"dot-dot out of the root", session{node: "n1", user: "node-user", root: "/volumes/csi/v1/uuid/../../v2"}, false},
		{"relative root", session{node: "n1", user: "node-user", root: "volumes/csi/v1/uuid"}, false},
	} {
		if got := c.s.attributed("n1", grants); got != c.want {
			t.Errorf("%s: attributed = %v, want %v", c.name, got, c.want)
		}
	}
	if (session{node: "n1", user: "u", root: "/anything"}).attributed("n1", []grant{{user: "u", root: "/"}}) != true {
		t.Error("a PV of the filesystem root does not cover its subdirectories")
	}
	if (session{node: "n1", user: "u", root: "/x"}).attributed("n1", nil) {
		t.Error("a filesystem without PVs attributed a session")
	}
}

// TestScope: the grants come from the driver's PVs and their node-stage Secrets (the admin
// pair first, as the CephFS node reads them); other drivers' PVs and clusters outside the
// map are left out, and a PV whose user cannot be read is reported without hiding the others.
func TestScope(t *testing.T) {
	const drv = "cephfs.test"
	key := "AQDSXgtr9gZ1FhAAggRWRW6pJIo/DesLRAv/mQ=="
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	pv := func(name, driver, cluster, fs, root, secret string) *corev1.PersistentVolume {
		p := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name,
				VolumeAttributes: map[string]string{"clusterID": cluster, "fsName": fs, "rootPath": root}}}}}
		if secret != "" {
			p.Spec.CSI.NodeStageSecretRef = &corev1.SecretReference{Namespace: "ns", Name: secret}
		}
		return p
	}
	kc := fake.NewClientset(
		secret("node", map[string]string{"userID": "node-user", "userKey": key}),
		secret("both", map[string]string{"userID": "static-user", "userKey": key, "adminID": "stage-admin", "adminKey": key}),
		pv("a", drv, "c1", "fs1", "/volumes/csi/a/u", "node"),
		pv("b", drv, "c1", "fs1", "/volumes/csi/b/u", "node"),
		pv("c", drv, "c1", "fs2", "/volumes/csi/c/u", "both"),
		pv("d", "other.driver", "c1", "fs3", "/volumes/csi/d/u", "node"),
		pv("e", drv, "elsewhere", "fs4", "/volumes/csi/e/u", "node"),
		pv("f", drv, "c1", "fs5", "/volumes/csi/f/u", "missing"),
		pv("g", drv, "c1", "fs6", "/volumes/csi/g/u", ""),
		pv("h", drv, "c1", "fs7", "/volumes/csi/h/u;x", "node"),
	)
	b := &CephFS{Driver: drv, Kube: kc, Clusters: func() []string { return []string{"c1"} }}
	sc, err := b.scope(context.Background())
	want := "map[c1:map[fs1:[{node-user /volumes/csi/a/u} {node-user /volumes/csi/b/u}] fs2:[{stage-admin /volumes/csi/c/u}]]]"
	if fmt.Sprint(sc) != want {
		t.Errorf("scope %v\nwant  %s", sc, want)
	}
	for _, pv := range []string{"PersistentVolume f", "PersistentVolume g", "PersistentVolume h"} {
		if err == nil || !strings.Contains(err.Error(), pv) {
			t.Errorf("error %v does not report %s", err, pv)
		}
	}
	if err != nil && strings.Contains(err.Error(), key) {
		t.Error("the error carries a key")
	}
}
