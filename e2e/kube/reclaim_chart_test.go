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
// The CephFS node plugin, which has nothing to reclaim, gets neither (its token is for its
// Event about an older mount holder).
func TestChartNodeCSIAddons(t *testing.T) {
	_, dss := rendered(t, "rbd.csiAddons.enabled=true", "rbd.csiAddons.node=true", "cephfs.csiAddons.enabled=true", "rbd.csiAddons.nodePort=9172")
	for name, ds := range dss {
		if !strings.HasSuffix(name, "-node") {
			continue
		}
		spec := ds.Spec.Template.Spec
		checkNodeTokens(t, name, spec, nodeTokenContainers(name, true, "csi-addons"))
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
	}
}

// TestChartNodeTokenOnlyWhereNeeded: the RBD node pod never mounts the service account token
// into every container (node-driver-registrar must not get the node account's get nodes);
// with read affinity the plugin, which reads its own Node's labels, gets it, and the
// csi-addons sidecar when it runs: each a projected token of its own mount. The CephFS plugin
// gets one with a mount holder, for its Event about an older holder, and no other container.
func TestChartNodeTokenOnlyWhereNeeded(t *testing.T) {
	affinity := []string{"cluster.readAffinity.enabled=true", "cluster.readAffinity.crushLocationLabels={topology.kubernetes.io/zone}"}
	addons := []string{"rbd.csiAddons.enabled=true", "rbd.csiAddons.node=true"}
	for _, c := range []struct {
		name  string
		extra []string
		want  []string // the RBD node containers with a token
	}{
		{"none", nil, nil},
		{"csi-addons", addons, []string{"csi-addons"}},
		{"read affinity", affinity, []string{"monoceph"}},
		{"read affinity and csi-addons", append(slices.Clone(affinity), addons...), []string{"monoceph", "csi-addons"}},
		{"domain labels", []string{"rbd.domainLabels={topology.kubernetes.io/zone}"}, []string{"monoceph"}},
		{"no mount holder", []string{"mounter.enabled=false"}, nil},
		{"no mount holder, csi-addons", append([]string{"mounter.enabled=false"}, addons...), []string{"csi-addons"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, dss := rendered(t, c.extra...)
			for name, ds := range dss {
				if strings.HasSuffix(name, "-node") {
					holder := !slices.Contains(c.extra, "mounter.enabled=false")
					checkNodeTokens(t, name, ds.Spec.Template.Spec, nodeTokenContainers(name, holder, c.want...))
				}
			}
		})
	}
}

// nodeTokenContainers is want for the RBD node DaemonSet name; for the CephFS one the plugin
// with a mount holder (it records an Event on its Node when the holder is older), else nothing.
func nodeTokenContainers(name string, holder bool, want ...string) []string {
	switch {
	case !strings.Contains(name, "cephfs"):
		return want
	case holder:
		return []string{"monoceph"}
	}
	return nil
}

// checkNodeTokens: the pod opts out of the token for all its containers and exactly the
// containers want mount one, read-only, from a projected service account token volume.
func checkNodeTokens(t *testing.T, name string, spec corev1.PodSpec, want []string) {
	t.Helper()
	if a := spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("%s: the service account token is mounted into every container", name)
	}
	var got []string
	for _, c := range spec.Containers {
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
		})
		if i < 0 {
			continue
		}
		got = append(got, c.Name)
		m := c.VolumeMounts[i]
		if !m.ReadOnly {
			t.Errorf("%s/%s: service account token mounted writable", name, c.Name)
		}
		j := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if j < 0 || spec.Volumes[j].Projected == nil ||
			!slices.ContainsFunc(spec.Volumes[j].Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }) {
			t.Errorf("%s/%s: token mount %s is no projected service account token volume of the pod", name, c.Name, m.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: service account token mounted in %v, want %v", name, got, want)
	}
}
