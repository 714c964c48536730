package kube

import (
	"fmt"
	"os"
	"strings"
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

func TestPodmanRun(t *testing.T) {
	yes, no := true, false
	uid, root := int64(65532), int64(0)
	bidi := corev1.MountPropagationBidirectional
	controller := corev1.Container{Name: "monoceph", Image: "quay.io/monoceph/monoceph:0.1.0", Args: []string{"--nodeid=$(NODE_ID)", "--endpoint=unix:///csi/csi.sock"},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "socket-dir", MountPath: "/csi"}, {Name: "cluster-map", MountPath: "/etc/monoceph", ReadOnly: true}}}
	node := corev1.Container{Name: "monoceph", Image: "m:1", SecurityContext: &corev1.SecurityContext{Privileged: &yes,
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "kubelet-dir", MountPath: "/k", MountPropagation: &bidi}, {Name: "dev", MountPath: "/dev"}}}
	nonRoot := &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	volumes := map[string]string{"socket-dir": "/r/socket", "cluster-map": "/r/map", "kubelet-dir": "/r/k", "dev": "/dev"}
	env := map[string]string{"NODE_ID": "n1", "A": "b"}
	label := fmt.Sprintf("%s=%d", e2eLabel, os.Getpid())
	for _, c := range []struct {
		name    string
		podSC   *corev1.PodSecurityContext
		c       corev1.Container
		saDir   string
		files   []string
		want    string // the arguments after the common ones, joined by spaces
		wantErr string
	}{
		{name: "controller: non-root, read-only, no privileges", podSC: nonRoot, c: controller, saDir: "/r/sa",
			want: "--cap-drop ALL --read-only --read-only-tmpfs=false --security-opt no-new-privileges --user 65532:65532 " +
				"--env A=b --env NODE_ID=n1 --volume /r/socket:/csi:rprivate --volume /r/map:/etc/monoceph:rprivate,ro " +
				"--volume /r/sa:/var/run/secrets/kubernetes.io/serviceaccount:ro quay.io/monoceph/monoceph:0.1.0 --nodeid=n1 --endpoint=unix:///csi/csi.sock"},
		{name: "node: privileged, mounts reach the host", c: node,
			want: "--privileged --cap-add SYS_ADMIN --env A=b --env NODE_ID=n1 --volume /r/k:/k:rshared --volume /dev:/dev:rprivate m:1"},
		{name: "node with a host file", c: node, files: []string{"/tmp/shim.so"},
			want: "--privileged --cap-add SYS_ADMIN --env A=b --env NODE_ID=n1 --volume /r/k:/k:rshared --volume /dev:/dev:rprivate " +
				"--volume /tmp/shim.so:/tmp/shim.so:ro m:1"},
		{name: "non-root as root", podSC: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &root}, c: controller, wantErr: "runAsNonRoot"},
		{name: "non-root without a user", podSC: &corev1.PodSecurityContext{RunAsNonRoot: &yes}, c: controller, wantErr: "runAsNonRoot"},
		{name: "unsupported pod field", podSC: &corev1.PodSecurityContext{FSGroup: &uid}, c: controller, wantErr: "unsupported pod securityContext"},
		{name: "unsupported container field", c: corev1.Container{Name: "x", SecurityContext: &corev1.SecurityContext{RunAsUser: &uid, ProcMount: new(corev1.ProcMountType)}},
			wantErr: "unsupported securityContext"},
		{name: "unconfined seccomp", podSC: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}, c: controller, wantErr: "seccomp"},
		{name: "subPath", c: corev1.Container{Name: "x", VolumeMounts: []corev1.VolumeMount{{Name: "dev", MountPath: "/d", SubPath: "a"}}}, wantErr: "subPath"},
		{name: "unknown volume", c: corev1.Container{Name: "x", VolumeMounts: []corev1.VolumeMount{{Name: "nope", MountPath: "/d"}}}, wantErr: "names no volume"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: c.podSC}}
			got, err := podmanRun(pod, c.c, "ctr", env, volumes, c.saDir, c.files)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one naming %q (args %q)", err, c.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			common := "run --rm --name ctr --label " + label + " --pull never --network host "
			if g := strings.Join(got, " "); g != common+c.want {
				t.Errorf("podman %s\nwant   %s", g, common+c.want)
			}
		})
	}
}
