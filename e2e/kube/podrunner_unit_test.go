package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestExpand(t *testing.T) {
	env := map[string]string{"NODE_ID": "n1", "EMPTY": ""}
	for _, c := range []struct{ in, want string }{
		{"--nodeid=$(NODE_ID)", "--nodeid=n1"},
		{"$(EMPTY)x", "x"},
		{"$(UNDEFINED)", "$(UNDEFINED)"},
		{"$$(NODE_ID)", "$(NODE_ID)"},
		{"a$(NODE_ID)b$(NODE_ID)", "an1bn1"},
		{"$(", "$("},
		{"plain", "plain"},
	} {
		if got := expand(c.in, env); got != c.want {
			t.Errorf("expand(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestRewritePaths(t *testing.T) {
	mounts := []corev1.VolumeMount{{Name: "kubelet", MountPath: "/var/lib/kubelet"}, {Name: "plugin", MountPath: "/var/lib/kubelet/plugins/x"},
		{Name: "socket", MountPath: "/csi"}, {Name: "dev", MountPath: "/dev"}}
	volumes := map[string]string{"kubelet": "/r/kubelet", "plugin": "/r/plugin", "socket": "/r/socket", "dev": "/dev"}
	for _, c := range []struct{ in, want string }{
		{"--csi-address=/csi/csi.sock", "--csi-address=/r/socket/csi.sock"},
		{"--endpoint=unix:///csi/csi.sock", "--endpoint=unix:///r/socket/csi.sock"},
		// the longest mount path wins
		{"--endpoint=unix:///var/lib/kubelet/plugins/x/csi.sock", "--endpoint=unix:///r/plugin/csi.sock"},
		{"--root=/var/lib/kubelet", "--root=/r/kubelet"},
		// a path that only starts like a mount path is not under it
		{"--addons=/csi-addons.sock", "--addons=/csi-addons.sock"},
		{"--a=/csi-x/csi/y", "--a=/csi-x/r/socket/y"},
		{"--dev=/dev/loop0", "--dev=/dev/loop0"},
		{"--v=2", "--v=2"},
	} {
		if got := rewritePaths(c.in, mounts, volumes); got != c.want {
			t.Errorf("rewritePaths(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"quay.io/monoceph/monoceph:0.1.0":                    "monoceph",
		"registry.k8s.io/sig-storage/csi-provisioner:v5.3.0": "csi-provisioner",
		"quay.io/csiaddons/k8s-sidecar@sha256:0123":          "k8s-sidecar",
		"localhost:5000/csi-resizer":                         "csi-resizer",
	} {
		if got := imageName(in); got != want {
			t.Errorf("imageName(%q) = %q, want %q", in, got, want)
		}
	}
}
