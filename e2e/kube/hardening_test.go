package kube

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/kubetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// rendered is helm template of the chart with the minimal values and extra, as typed
// Deployments and DaemonSets by name.
func rendered(t *testing.T, extra ...string) (map[string]appsv1.Deployment, map[string]appsv1.DaemonSet) {
	t.Helper()
	out, err := helmCmd(t, append([]string{"template", "r", "charts/monoceph"}, withMinimal(extra...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	deps, dss := map[string]appsv1.Deployment{}, map[string]appsv1.DaemonSet{}
	for _, o := range kubetest.Objects(t, "helm template", []byte(out)) {
		var err error
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d)
			deps[d.Name] = d
		case "DaemonSet":
			var d appsv1.DaemonSet
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d)
			dss[d.Name] = d
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(deps) != 2 || len(dss) != 2 {
		t.Fatalf("rendered %d Deployments and %d DaemonSets, want 2 each", len(deps), len(dss))
	}
	return deps, dss
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// TestChartControllersRunUnprivileged: the controller pods run as a non-root user under the
// runtime's default seccomp profile, every container without privilege escalation.
func TestChartControllersRunUnprivileged(t *testing.T) {
	deps, _ := rendered(t, "rbd.csiAddons.enabled=true", "rbd.snapshotMetadata.enabled=true")
	for name, d := range deps {
		sc := d.Spec.Template.Spec.SecurityContext
		switch {
		case sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("%s: pod securityContext %+v does not require a non-root user", name, sc)
		case sc.RunAsUser == nil || *sc.RunAsUser == 0:
			t.Errorf("%s: runs as root (the images' default user)", name)
		case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
			t.Errorf("%s: seccomp profile %+v, want RuntimeDefault", name, sc.SeccompProfile)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if s := c.SecurityContext; s == nil || s.AllowPrivilegeEscalation == nil || *s.AllowPrivilegeEscalation || (s.Privileged != nil && *s.Privileged) {
				t.Errorf("%s/%s: securityContext %+v allows privilege", name, c.Name, s)
			}
		}
	}
}

// TestChartNodeMetricsListener: the node plugins share the host's network, so their metrics
// and health listener binds the node's own IP by default, not every interface of the host;
// node.metricsHost moves it, and the liveness probe follows.
func TestChartNodeMetricsListener(t *testing.T) {
	for _, tt := range []struct {
		name      string
		set       []string
		addr      string // --metrics-address, without the port
		nodeIPEnv bool   // NODE_IP from status.hostIP
		probeHost string
	}{
		{"default: the node's IP", nil, "$(NODE_IP)", true, ""},
		{"loopback", []string{"node.metricsHost=127.0.0.1"}, "127.0.0.1", false, "127.0.0.1"},
		{"IPv6 loopback", []string{"node.metricsHost=::1"}, "[::1]", false, "::1"},
		{"every interface, on request", []string{"node.metricsHost=0.0.0.0"}, "0.0.0.0", false, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, dss := rendered(t, tt.set...)
			for name, ds := range dss {
				c := container(t, ds.Spec.Template.Spec, "monoceph")
				var addr string
				for _, a := range c.Args {
					if v, ok := strings.CutPrefix(a, "--metrics-address="); ok {
						addr = v
					}
				}
				port := c.Ports[slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" })].ContainerPort
				if want := tt.addr + ":" + strconv.Itoa(int(port)); addr != want {
					t.Errorf("%s: --metrics-address=%s, want %s", name, addr, want)
				}
				hasEnv := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
					return e.Name == "NODE_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.hostIP"
				})
				if hasEnv != tt.nodeIPEnv {
					t.Errorf("%s: NODE_IP from status.hostIP: %v, want %v", name, hasEnv, tt.nodeIPEnv)
				}
				if h := c.LivenessProbe.HTTPGet.Host; h != tt.probeHost {
					t.Errorf("%s: liveness probe host %q, want %q", name, h, tt.probeHost)
				}
			}
		})
	}
}
