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
		{"kernel client: hostname, at a PV's root", session{host: "n1", user: "node-user", root: "/volumes/csi/v1/uuid"}, true},
		{"the node's user, no root announced", session{host: "n1", user: "node-user"}, false},
		{"the node's user and ID, no root announced", session{node: "n1", user: "node-user"}, false},
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

// TestMDSQueries: the sessions are listed only on the filesystems the driver's PVs use (the
// MDS of another Kubernetes cluster's filesystem on the same Ceph cluster is never asked, so
// its sessions are neither attributed nor evicted), from their active ranks only, once per
// node-stage user (issue 26, item 3).
func TestMDSQueries(t *testing.T) {
	mds := func(gid int, name string, rank int, state string) string {
		return fmt.Sprintf(`"gid_%d": {"gid": %d, "name": %q, "rank": %d, "state": %q}`, gid, gid, name, rank, state)
	}
	dump := `{"epoch": 9, "filesystems": [
		{"id": 1, "mdsmap": {"fs_name": "ours", "info": {` + mds(4141, "a", 0, "up:active") + `, ` + mds(4142, "b", 1, "up:active") + `, ` +
		mds(4143, "c", 0, "up:standby-replay") + `}}},
		{"id": 2, "mdsmap": {"fs_name": "theirs", "info": {` + mds(4150, "d", 0, "up:active") + `}}},
		{"id": 3, "mdsmap": {"fs_name": "ours2", "info": {` + mds(4160, "e", 0, "up:active") + `, ` + mds(4161, "f", 1, "up:rejoin") + `}}}],
		"standbys": [{"gid": 4170, "name": "g", "rank": -1, "state": "up:standby"}]}`
	for _, c := range []struct {
		name  string
		users map[string][]string
		want  string
	}{
		{"every filesystem (the tests' listing)", nil, "[{a ours } {b ours } {e ours2 } {d theirs }]"},
		{"the PVs' filesystems, every session (evicting)", map[string][]string{"ours": nil, "ours2": nil},
			"[{a ours } {b ours } {e ours2 }]"},
		{"the PVs' filesystems, by node-stage user", map[string][]string{"ours": {"u1", "u2"}, "ours2": {"u3"}},
			"[{a ours u1} {a ours u2} {b ours u1} {b ours u2} {e ours2 u3}]"},
		{"a filesystem no PV uses is not asked", map[string][]string{"ours": {"u1"}}, "[{a ours u1} {b ours u1}]"},
		{"a PV's filesystem that does not exist", map[string][]string{"gone": {"u1"}}, "[]"},
		{"no PVs", map[string][]string{}, "[]"},
	} {
		q, err := mdsQueries([]byte(dump), c.users)
		if err != nil || fmt.Sprint(q) != c.want {
			t.Errorf("%s: queries %v, %v; want %s", c.name, q, err, c.want)
		}
	}
	if _, err := mdsQueries([]byte(`[]`), nil); err == nil {
		t.Error("a garbled fs dump was read")
	}
}
