package kube

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/monoceph/monoceph/internal/kubetest"
)

// localValues adapts the README's install to the test's machine: one controller replica each
// on the control plane node and the node plugins on nodes A and B (nodes_test.go), all on the
// host's network with a port of its own for every listener, FUSE mounters (this kernel has no
// rbd or ceph module), and the changed block service reached at 127.0.0.1 with that address in
// its generated certificate. The kubelet directory is the chart's default: each node's is below
// its own root. forChart01 leaves out what the chart 0.1.0 schema does not know (the
// attacher's and the mount holders' ports).
func (e *env) localValues(forChart01 bool) string {
	p := e.ports
	attacher := fmt.Sprintf(", attacher: %d", p["rbdAttacher"])
	rbdHolder := fmt.Sprintf("\n  mounterMetricsPort: %d", p["rbdMounterMetrics"])
	fsHolder := fmt.Sprintf("\n  mounterMetricsPort: %d", p["fsMounterMetrics"])
	// The pod runner projects no service account tokens, and the CephFS node plugin's token is
	// there only for its Event about an older mount holder (tested against a real API server
	// with the chart's Role in internal/driver's TestHolderEventsOnAPIServer).
	holderEvents := "\n  holderEvents: false"
	if forChart01 {
		attacher, rbdHolder, fsHolder, holderEvents = "", "", "", ""
	}
	v := fmt.Sprintf(`controller:
  replicas: 1
  nodeSelector: {%s: "true"}
  # the rollouts hand over the sidecars' leases quickly
  leaderElection: {leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}
node:
  nodeSelector: {%s: "true"}%s
rbd:
  controllerMetricsPort: %d
  nodeMetricsPort: %d%s
  sidecarHealthPorts: {provisioner: %d, snapshotter: %d, resizer: %d%s}
  csiAddons: {port: %d}
  storageClass: {mounter: fuse}
  snapshotMetadata:
    port: %d
    address: 127.0.0.1:%d
    tls: {extraIPAddresses: [127.0.0.1]}
cephfs:
  controllerMetricsPort: %d
  nodeMetricsPort: %d%s
  sidecarHealthPorts: {provisioner: %d, snapshotter: %d, resizer: %d}
  csiAddons: {port: %d}
  storageClass: {mounter: fuse}
`, controlLabel, storageLabel, holderEvents, p["rbdControllerMetrics"], p["rbdNodeMetrics"], rbdHolder, p["rbdProvisioner"], p["rbdSnapshotter"], p["rbdResizer"], attacher,
		p["rbdCSIAddons"], p["rbdSnapshotMetadata"], p["rbdSnapshotMetadata"],
		p["fsControllerMetrics"], p["fsNodeMetrics"], fsHolder, p["fsProvisioner"], p["fsSnapshotter"], p["fsResizer"], p["fsCSIAddons"])
	// not below the test's TempDir: helm's -f splits its argument at commas, which test names hold
	dir, err := os.MkdirTemp(e.runner.root, "values-")
	if err != nil {
		e.t.Fatal(err)
	}
	f := filepath.Join(dir, "local-processes.yaml")
	if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return f
}

// chart01 is the chart as released in version 0.1.0 (before RBD volumes were attached), which
// the upgrade test starts from: `helm package charts/monoceph` of main at 91865a7, the last
// commit of chart 0.1.0.
const chart01 = "e2e/kube/testdata/monoceph-0.1.0.tgz"

// helmInstall runs the README's install commands with the local values appended, installing
// chart (the README's charts/monoceph replaced by it when given).
func (e *env) helmInstall(chart string) {
	e.t.Helper()
	script := strings.TrimRight(e.readmeBlock("helm-install"), "\n")
	if chart != "" {
		script = strings.Replace(script, " charts/monoceph ", " "+chart+" ", 1)
	}
	script += " -f " + e.localValues(chart == chart01) + "\n"
	out := e.shell(script, "CEPH_MONITORS="+e.ceph.Monitors)
	e.t.Logf("helm install:\n%s", out)
	// NOTES.txt tells the user the next step of every feature this install enabled
	for _, want := range []string{"storageClassName: monoceph-rbd", "storageClassName: monoceph-cephfs",
		"create a NetworkFence with driver " + rbdDriver, `SnapshotMetadataService "` + rbdDriver + `"`,
		"--resource-name=<sa>", "keeps the changed block service's CA", "volumeGroupSnapshotClassName monoceph-rbd (rbd)"} {
		if !strings.Contains(out, want) {
			e.t.Errorf("helm install notes lack %q", want)
		}
	}
	e.noKeyInRelease(out)
	// the PVs' node-stage secret is the node user's
	s, err := e.kc.CoreV1().Secrets(namespace).Get(context.Background(), release+"-ceph-node-user", metav1.GetOptions{})
	if err != nil || string(s.Data["userID"]) != "monoceph-node" {
		e.t.Fatalf("node user Secret: %v", err)
	}
}

// noKeyInRelease checks that no Ceph key (the README's users', the admin's) is in what helm
// install printed, nor in Helm's release Secret, which holds the release's values and manifest
// (base64 of gzipped JSON, in the Secret's data).
func (e *env) noKeyInRelease(installOut string) {
	e.t.Helper()
	keys := []string{e.ceph.Admin.Key()}
	for _, user := range []string{"client.monoceph", "client.monoceph-node"} {
		if k, err := e.cephCmd("ceph", "auth", "get-key", user); err == nil && k != "" {
			keys = append(keys, k)
		} else {
			e.t.Errorf("the README's Ceph user %s: %v", user, err)
		}
	}
	s, err := e.kc.CoreV1().Secrets(namespace).Get(context.Background(), "sh.helm.release.v1."+release+".v1", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	gz, err := base64.StdEncoding.DecodeString(string(s.Data["release"]))
	if err != nil {
		e.t.Fatalf("Helm's release Secret: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		e.t.Fatalf("Helm's release Secret: %v", err)
	}
	rel, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(rel, []byte(`"config":`)) || !bytes.Contains(rel, []byte("existingSecret")) {
		e.t.Fatalf("Helm's release Secret does not hold the release's values (%v):\n%.300s", err, rel)
	}
	for i, k := range keys {
		if bytes.Contains(rel, []byte(k)) || strings.Contains(installOut, k) {
			e.t.Errorf("Ceph key %d of %d is in Helm's release Secret or in helm's output", i+1, len(keys))
		}
	}
}

// helmUpgrade runs the README's upgrade command with the local values appended, acting as the
// kubelets meanwhile: the pre-upgrade hook's Job must run for the upgrade to go on.
func (e *env) helmUpgrade() {
	e.t.Helper()
	script := strings.TrimRight(e.readmeBlock("helm-upgrade"), "\n") + " -f " + e.localValues(false) + "\n"
	done := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = e.shellErr(script)
		done <- err
	}()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case err := <-done:
			if err != nil {
				e.t.Fatalf("helm upgrade: %v\n%s", err, out)
			}
			e.t.Logf("helm upgrade:\n%s", out)
			return
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.t.Fatal("helm upgrade did not end in 3 minutes")
		}
		e.kubeletStep()
	}
}

// releaseObjects lists the objects of the release's manifest.
func (e *env) releaseObjects() []*unstructured.Unstructured {
	e.t.Helper()
	return kubetest.Objects(e.t, "helm get manifest", []byte(e.shell(fmt.Sprintf("helm get manifest %s --namespace %s", release, namespace))))
}

// missing returns the objects of objs the API server does not have (or, with gone, has).
func (e *env) missing(objs []*unstructured.Unstructured, gone bool) []string {
	res := newResources(e.kc.Discovery(), e.dyn)
	var out []string
	for _, o := range objs {
		_, err := res.of(e.t, o, namespace).Get(context.Background(), o.GetName(), metav1.GetOptions{})
		switch {
		case err == nil && gone, apierrors.IsNotFound(err) && !gone:
			out = append(out, o.GetKind()+"/"+o.GetName())
		case err != nil && !apierrors.IsNotFound(err):
			e.t.Fatalf("get %s/%s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	return out
}

// nodePlugins is how many node plugins a release runs per driver: one on each of nodes A and B
// (its controllers run on the control plane node).
const nodePlugins = 2

// startPods acts as the kubelets (kubeletStep) until the release's Deployments and DaemonSets
// are rolled out (every pod of their current template running, none of an earlier one left),
// then waits for the pods' sockets and calls their probes.
func (e *env) startPods() {
	e.t.Helper()
	e.startPodsOf(namespace, release, map[string]string{"rbd": rbdDriver, "cephfs": fsDriver})
}

// startPodsOf runs the pods of one release in ns, whose enabled drivers have the names given
// (driver kind → driver name).
func (e *env) startPodsOf(ns, rel string, drivers map[string]string) {
	e.t.Helper()
	ctx := context.Background()
	want := map[string]int{}
	for kind := range drivers {
		want[kind+"-controller"], want[kind+"-node"] = 1, nodePlugins
	}
	var pods []corev1.Pod
	e.waitFor(3*time.Minute, "the release's pods running", func() (bool, string) {
		e.kubeletStep()
		sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + rel}
		deps, err := e.kc.AppsV1().Deployments(ns).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		for _, d := range deps.Items {
			st := d.Status
			if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != *d.Spec.Replicas || st.Replicas != *d.Spec.Replicas || st.ReadyReplicas != *d.Spec.Replicas {
				return false, fmt.Sprintf("Deployment %s rolling out: %+v", d.Name, st)
			}
		}
		dss, err := e.kc.AppsV1().DaemonSets(ns).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		for _, d := range dss.Items {
			// the mount holders (chart 0.2.0 on), next to the node plugins
			if c := d.Labels["app.kubernetes.io/component"]; strings.HasSuffix(c, "-mounter") {
				want[c] = nodePlugins
			}
			st := d.Status
			if st.ObservedGeneration < d.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberReady != st.DesiredNumberScheduled || st.DesiredNumberScheduled == 0 {
				return false, fmt.Sprintf("DaemonSet %s rolling out: %+v", d.Name, st)
			}
		}
		list, err := e.kc.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		pods = pods[:0]
		count := map[string]int{}
		others := 0
		for _, p := range list.Items {
			c := p.Labels["app.kubernetes.io/component"]
			if _, ok := want[c]; !ok {
				continue // the upgrade hook's
			}
			if p.DeletionTimestamp != nil || !e.runner.started(p.Name) {
				others++
				continue
			}
			count[c]++
			pods = append(pods, p)
		}
		return fmt.Sprint(count) == fmt.Sprint(want) && others == 0, fmt.Sprintf("running %v, others %d", count, others)
	})
	// the sockets appear once the drivers serve
	for _, p := range pods {
		c := p.Labels["app.kubernetes.io/component"]
		var sock string
		switch kind, _ := strings.CutSuffix(c, "-node"); {
		case strings.HasSuffix(c, "-node"):
			sock = e.runner.nodeOf(&p).host(filepath.Join(kubeletDir, "plugins", drivers[kind], "csi.sock"))
		case strings.HasSuffix(c, "-mounter"):
			// <state-dir>/<driver name>/mounter.sock on the holder's node
			sock = e.runner.nodeOf(&p).host(filepath.Join(podArg(&p, "--state-dir"), podArg(&p, "--drivername"), "mounter.sock"))
		default:
			sock = filepath.Join(e.runner.root, "pods", p.Name, "volumes", "socket-dir", "csi.sock")
		}
		e.runner.socketReady(e.t, p.Name, sock, 30*time.Second)
		e.checkProbes(&p)
	}
	// the node plugins serve: the kubelets register them
	e.registerDrivers(slices.Collect(maps.Values(drivers))...)
}

// podArg is the value of flag (--name) in the pod's first container's arguments, "" when absent.
func podArg(p *corev1.Pod, flag string) string {
	for _, a := range p.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// checkProbes calls every HTTP probe of a pod's containers as the kubelet would, so a wrong
// path or port in the chart fails here instead of crash-looping in a cluster.
func (e *env) checkProbes(pod *corev1.Pod) {
	e.t.Helper()
	for _, c := range pod.Spec.Containers {
		for kind, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if pr == nil || pr.HTTPGet == nil {
				continue
			}
			port := pr.HTTPGet.Port.IntValue()
			for _, cp := range c.Ports {
				if cp.Name == pr.HTTPGet.Port.String() {
					port = int(cp.ContainerPort)
				}
			}
			host := "127.0.0.1"
			if pod.Spec.HostNetwork {
				host = e.runner.nodeOf(pod).ip
			}
			url := fmt.Sprintf("http://%s:%d%s", host, port, pr.HTTPGet.Path)
			e.waitFor(30*time.Second, fmt.Sprintf("%s probe of %s/%s (%s)", kind, pod.Name, c.Name, url), func() (bool, string) {
				resp, err := http.Get(url)
				if err != nil {
					return false, err.Error()
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK, resp.Status
			})
		}
	}
}

// installCluster brings up what a cluster administrator provides before the chart: the CRDs,
// the snapshot-controller, the csi-addons controller, and a node.
func (e *env) installCluster() {
	e.t.Helper()
	csiAddons := kubetest.ModuleDir(e.t, filepath.Join(e.repo, "scripts/tools/csi-addons"), "github.com/csi-addons/kubernetes-csi-addons")
	e.cp.ApplyCRDs(e.t, append(kubetest.SnapshotCRDs(e.t), filepath.Join(csiAddons, "deploy/controller/crds.yaml"))...)
	e.createNodes()
	env := e.runner.clusterEnv()
	e.runner.start(e.t, "", "snapshot-controller", filepath.Join(e.bin, "snapshot-controller"),
		[]string{"--kubeconfig=" + e.adminKC, "--leader-election=false", "--v=2", "--feature-gates=CSIVolumeGroupSnapshot=true"}, env, "")
	// the csi-addons manager authenticates to sidecars with the token at the in-cluster path
	// (even with a kubeconfig), so it runs like a pod, here with the admin identity
	saDir := e.runner.serviceAccountFiles(e.t, filepath.Join(e.runner.root, "csi-addons-manager"), e.cp.AdminToken, "csi-addons-system")
	e.runner.start(e.t, "", "csi-addons-manager", filepath.Join(e.bin, "csi-addons-manager"),
		[]string{"--health-probe-bind-address=0", "--metrics-bind-address=0", "--namespace=csi-addons-system"}, env, saDir)
}

// deleteLeftovers deletes the VolumeGroupSnapshots, VolumeSnapshots and PVCs a failed run left, and waits (bounded)
// for their contents and PVs, i.e. the RBD images and CephFS subvolumes, to go.
func (e *env) deleteLeftovers() {
	t := e.runner.t
	if !t.Failed() {
		return
	}
	ctx := context.Background()
	_ = e.snap.GroupsnapshotV1().VolumeGroupSnapshots(userNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = e.snap.SnapshotV1().VolumeSnapshots(userNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = e.kc.CoreV1().PersistentVolumeClaims(userNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		pvs, err1 := e.kc.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		contents, err2 := e.snap.SnapshotV1().VolumeSnapshotContents().List(ctx, metav1.ListOptions{})
		if err1 == nil && err2 == nil && len(pvs.Items) == 0 && len(contents.Items) == 0 {
			return
		}
		time.Sleep(time.Second)
	}
	t.Log("cleanup: PVs or snapshot contents still exist after 90 s; Ceph may keep their images or subvolumes")
}
