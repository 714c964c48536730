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
	// a controller and a node plugin per driver, and a mount holder per driver unless disabled
	wantDS := 4
	if slices.Contains(extra, "mounter.enabled=false") {
		wantDS = 2
	}
	if len(deps) != 2 || len(dss) != wantDS {
		t.Fatalf("rendered %d Deployments and %d DaemonSets, want 2 and %d", len(deps), len(dss), wantDS)
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

// TestChartNodeMetricsListener: the node plugins and the mount holders share the host's
// network, so their metrics and health listener binds the node's own IP by default, not every
// interface of the host; node.metricsHost moves it, and the probe (liveness for the node
// plugin, readiness only for the holder) follows.
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
				cname := "monoceph"
				if strings.HasSuffix(name, "-mounter") {
					cname = "mounter"
				}
				c := container(t, ds.Spec.Template.Spec, cname)
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
				probe := c.LivenessProbe
				if cname == "mounter" {
					// a liveness restart of the holder would pause the node's FUSE volumes
					if c.LivenessProbe != nil {
						t.Errorf("%s: a liveness probe on the mount holder", name)
					}
					probe = c.ReadinessProbe
				}
				if h := probe.HTTPGet.Host; h != tt.probeHost {
					t.Errorf("%s: probe host %q, want %q", name, h, tt.probeHost)
				}
			}
		})
	}
}

// TestChartMountHolder: each node plugin talks to the mount holder of its driver at the socket
// that holder serves (<state-dir>/<driver name>/mounter.sock), the holder is updated only on
// request (OnDelete), and without the holder the node plugin keeps its FUSE mounts itself.
func TestChartMountHolder(t *testing.T) {
	arg := func(c corev1.Container, flag string) string {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v
			}
		}
		return ""
	}
	_, dss := rendered(t)
	for _, kind := range []string{"rbd", "cephfs"} {
		node := container(t, dss["r-monoceph-"+kind+"-node"].Spec.Template.Spec, "monoceph")
		ds := dss["r-monoceph-"+kind+"-mounter"]
		holder := container(t, ds.Spec.Template.Spec, "mounter")
		want := "unix://" + arg(holder, "--state-dir") + "/" + arg(holder, "--drivername") + "/mounter.sock"
		if got := arg(node, "--mounter-endpoint"); got != want || arg(node, "--state-dir") != arg(holder, "--state-dir") {
			t.Errorf("%s: node plugin --mounter-endpoint=%s, want %s (the holder's socket)", kind, got, want)
		}
		if arg(holder, "--mode") != "mounter" || arg(holder, "--type") != kind {
			t.Errorf("%s: holder args %q", kind, holder.Args)
		}
		if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType {
			t.Errorf("%s: holder update strategy %s, want OnDelete", kind, ds.Spec.UpdateStrategy.Type)
		}
	}
	_, dss = rendered(t, "mounter.enabled=false")
	for name, ds := range dss {
		if c := container(t, ds.Spec.Template.Spec, "monoceph"); arg(c, "--mounter-endpoint") != "" {
			t.Errorf("%s: --mounter-endpoint without a holder", name)
		}
	}
}
