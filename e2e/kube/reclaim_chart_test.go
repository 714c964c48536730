package kube

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestChartNodeCSIAddons: with csi-addons on for the node, the RBD node plugin serves ReclaimSpace on a
// csi-addons socket of its own in the plugin directory, where its csi-addons sidecar finds it;
// that sidecar, unprivileged, is the only container of the pod with a service account token.
// The CephFS node plugin, which has nothing to reclaim, gets neither.
func TestChartNodeCSIAddons(t *testing.T) {
	_, dss := rendered(t, "rbd.csiAddons.enabled=true", "rbd.csiAddons.node=true", "cephfs.csiAddons.enabled=true", "rbd.csiAddons.nodePort=9172")
	for name, ds := range dss {
		if !strings.HasSuffix(name, "-node") {
			continue
		}
		spec := ds.Spec.Template.Spec
		plugin := container(t, spec, "monoceph")
		var endpoint string
		for _, a := range plugin.Args {
			if v, ok := strings.CutPrefix(a, "--csi-addons-endpoint="); ok {
				endpoint = v
			}
		}
		hasSidecar := slices.ContainsFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "csi-addons" })
		if strings.Contains(name, "cephfs") {
			if endpoint != "" || hasSidecar {
				t.Errorf("%s: a CephFS node plugin with csi-addons (%q, sidecar %v)", name, endpoint, hasSidecar)
			}
			continue
		}
		if !hasSidecar {
			t.Fatalf("%s: no csi-addons sidecar", name)
		}
		sidecar := container(t, spec, "csi-addons")
		// the plugin's socket, seen by the sidecar through the plugin directory at /csi
		var pluginDir string
		for _, v := range spec.Volumes {
			if v.Name == "plugin-dir" && v.HostPath != nil {
				pluginDir = v.HostPath.Path
			}
		}
		if want := "unix://" + filepath.Join(pluginDir, "csi-addons.sock"); endpoint != want {
			t.Errorf("%s: --csi-addons-endpoint=%s, want %s", name, endpoint, want)
		}
		for _, want := range []string{"--csi-addons-address=unix:///csi/csi-addons.sock", "--controller-port=9172", "--controller-ip=$(NODE_IP)"} {
			if !slices.Contains(sidecar.Args, want) {
				t.Errorf("%s: csi-addons sidecar args %v lack %s", name, sidecar.Args, want)
			}
		}
		if !slices.ContainsFunc(sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "plugin-dir" && m.MountPath == "/csi" }) {
			t.Errorf("%s: the sidecar does not see the plugin directory at /csi", name)
		}
		if s := sidecar.SecurityContext; s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation || (s.Privileged != nil && *s.Privileged) {
			t.Errorf("%s: the csi-addons sidecar's securityContext %+v allows privilege", name, s)
		}
		if a := spec.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("%s: the service account token is mounted into every container", name)
		}
		for _, c := range spec.Containers {
			token := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
			})
			if token != (c.Name == "csi-addons") {
				t.Errorf("%s/%s: service account token mounted: %v", name, c.Name, token)
			}
		}
	}
}
