package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The test cluster has three nodes on this one machine. The control plane node runs the
// controllers at 127.0.0.1 (where the Ceph daemons are too); nodes A and B run the node
// plugins' containers, each node with an address of its own: their Ceph clients connect from
// it (an LD_PRELOAD shim, bind-mounted into the node's containers, binds their sockets before
// they connect: see cephtest.BindSrcEnv), their host-network listeners bind it, and their
// hostPath volumes are below a directory of their own, the node's root: a path P on the node
// is root/P here. So Ceph sees two nodes, fencing one cuts off exactly its clients, and the
// other, the controllers and the cluster carry on.
const (
	controlNode = "e2e-control"
	nodeA       = "e2e-node-a"
	nodeB       = "e2e-node-b"

	storageLabel = "monoceph.io/e2e-storage"
	controlLabel = "monoceph.io/e2e-control"
)

// node is one simulated node.
type node struct {
	name  string
	ip    string
	root  string            // stands for the node's filesystem (hostPath volumes)
	env   map[string]string // given to every container on the node
	files []string          // host files its containers see at the same path (the shim)

	mu   sync.Mutex
	dead bool // its kubelet stopped acting (the node was lost)
}

// The kubelet's directory and the node plugins' state directory on every node (the chart's
// defaults).
const (
	kubeletDir = "/var/lib/kubelet"
	stateDir   = "/run/monoceph"
)

// host is where path p of the node is on this machine.
func (n *node) host(p string) string { return filepath.Join(n.root, p) }

func (n *node) lost() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dead
}

func (n *node) setLost(dead bool) {
	n.mu.Lock()
	n.dead = dead
	n.mu.Unlock()
}

// newNodes lays out the three nodes below root.
func newNodes(t *testing.T, root string) map[string]*node {
	nodes := map[string]*node{controlNode: {name: controlNode, ip: "127.0.0.1", root: filepath.Join(root, "host")}}
	for name, n := range map[string]struct{ ip, dir string }{nodeA: {"127.0.0.2", "a"}, nodeB: {"127.0.0.3", "b"}} {
		env := map[string]string{}
		for _, kv := range cephtest.BindSrcEnv(t, n.ip) {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		// short: the CSI sockets the test connects to are below it (108-byte limit)
		nodes[name] = &node{name: name, ip: n.ip, root: filepath.Join(root, n.dir), env: env, files: []string{env["LD_PRELOAD"]}}
	}
	return nodes
}

// createNodes registers the nodes with the API server as kubelets do (the attach/detach
// controller manages volumes of nodes that carry its annotation), and node A's and B's
// CSINode objects, which the kubelet makes when the node plugins register: the external-attacher
// and the driver find node IDs there.
func (e *env) createNodes() {
	ctx := context.Background()
	for _, n := range e.nodes {
		labels := map[string]string{"kubernetes.io/hostname": n.name, storageLabel: "true"}
		if n.name == controlNode {
			labels = map[string]string{"kubernetes.io/hostname": n.name, controlLabel: "true"}
		}
		// the address a kubelet reports: the fencer blocklists only addresses of the tainted Node
		_, err := e.kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels,
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}}}}, metav1.CreateOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if n.name == controlNode {
			continue
		}
		var drivers []storagev1.CSINodeDriver
		for _, d := range []string{rbdDriver, fsDriver} {
			drivers = append(drivers, storagev1.CSINodeDriver{Name: d, NodeID: n.name})
		}
		if _, err := e.kc.StorageV1().CSINodes().Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n.name},
			Spec: storagev1.CSINodeSpec{Drivers: drivers}}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// registerDrivers adds drivers to the CSINode objects of nodes A and B, as their kubelets do
// when node plugins of those names register (the takeover's, under ceph-csi's names).
func (e *env) registerDrivers(drivers ...string) {
	e.t.Helper()
	ctx := context.Background()
	for _, n := range e.nodes {
		if n.name == controlNode {
			continue
		}
		cn, err := e.kc.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		changed := false
		for _, d := range drivers {
			if !slices.ContainsFunc(cn.Spec.Drivers, func(have storagev1.CSINodeDriver) bool { return have.Name == d }) {
				cn.Spec.Drivers = append(cn.Spec.Drivers, storagev1.CSINodeDriver{Name: d, NodeID: n.name})
				changed = true
			}
		}
		if changed {
			if _, err := e.kc.StorageV1().CSINodes().Update(ctx, cn, metav1.UpdateOptions{}); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// nodeOf is the node a pod runs on: the one it is bound to, or, in place of the scheduler,
// the one its DaemonSet affinity names, else the control plane node.
func (r *podRunner) nodeOf(pod *corev1.Pod) *node {
	if n, ok := r.nodes[pod.Spec.NodeName]; ok {
		return n
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					if n, ok := r.nodes[f.Values[0]]; ok {
						return n
					}
				}
			}
		}
	}
	return r.nodes[controlNode]
}

// listenOn binds a host-network container's "any address" listeners (--flag=:port) to its
// node's address: the node's interfaces are that address here.
func listenOn(arg, ip string) string {
	k, v, ok := strings.Cut(arg, "=:")
	if !ok || !strings.HasPrefix(k, "--") || strings.Trim(v, "0123456789") != "" {
		return arg
	}
	return k + "=" + ip + ":" + v
}

// kubeletStep does once what the kubelets of the live nodes do on their own: run the pods the
// chart's controllers created (a rollout's, the upgrade hook's) and finish the deletion of
// pods on their nodes by stopping their containers. A lost node's kubelet does nothing: its
// pods stay as they are until the pod garbage collector removes them. It returns the pods it
// started. Steps call it while they wait (it runs in the test's goroutine).
func (e *env) kubeletStep() []string {
	e.t.Helper()
	ctx := context.Background()
	// every release of the chart, in any namespace: the takeover installs two, under
	// ceph-csi's names and namespaces
	list, err := e.kc.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=monoceph"})
	if err != nil {
		e.t.Fatal(err)
	}
	// a node's mount holders start before its node plugins, which use them
	holderLast := func(p corev1.Pod) int {
		if strings.HasSuffix(p.Labels["app.kubernetes.io/component"], "-mounter") {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(list.Items, func(a, b corev1.Pod) int { return holderLast(a) - holderLast(b) })
	var started []string
	for i := range list.Items {
		pod := &list.Items[i]
		if e.runner.nodeOf(pod).lost() {
			continue
		}
		switch {
		case pod.DeletionTimestamp != nil:
			e.runner.stopPod(pod.Name)
			zero := int64(0)
			if err := e.kc.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				e.t.Fatal(err)
			}
		case pod.Status.Phase == corev1.PodPending && !e.runner.started(pod.Name):
			// All pod networks are 127.0.0.1 here, so a rollout's new controller pod would find
			// its ports taken by the old one: the old pod's containers stop first (as if it had
			// crashed; its object goes once the new pod is ready).
			if !pod.Spec.HostNetwork {
				for _, other := range list.Items {
					if other.Name != pod.Name && !other.Spec.HostNetwork &&
						other.Labels["app.kubernetes.io/instance"] == pod.Labels["app.kubernetes.io/instance"] &&
						other.Labels["app.kubernetes.io/component"] == pod.Labels["app.kubernetes.io/component"] {
						e.runner.stopPod(other.Name)
					}
				}
			}
			e.runner.run(e.t, ctx, pod)
			started = append(started, pod.Name)
		}
	}
	e.runner.finishJobs(e.t, ctx)
	return started
}

// waitPodsGone waits (60 s) until namespaces hold no pods after an uninstall, doing the
// kubelet's part meanwhile: stopping the containers of the pods the controllers delete.
func (e *env) waitPodsGone(what string, namespaces ...string) {
	e.t.Helper()
	ctx := context.Background()
	e.waitFor(60*time.Second, what, func() (bool, string) {
		left := 0
		for _, ns := range namespaces {
			list, err := e.kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, p := range list.Items {
				if p.DeletionTimestamp != nil {
					e.runner.stopPod(p.Name)
					zero := int64(0)
					_ = e.kc.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
			left += len(list.Items)
		}
		return left == 0, fmt.Sprintf("%d pods left", left)
	})
}

// setVolumesInUse reports, as a node's kubelet does in the node status, the volumes mounted
// there: the attach/detach controller does not detach those (unless the node is out of
// service).
func (e *env) setVolumesInUse(n *node, volume string, inUse bool) {
	e.t.Helper()
	ctx := context.Background()
	for range 10 {
		no, err := e.kc.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		name := corev1.UniqueVolumeName(volume)
		has := slices.Contains(no.Status.VolumesInUse, name)
		switch {
		case inUse && !has:
			no.Status.VolumesInUse = append(no.Status.VolumesInUse, name)
		case !inUse && has:
			no.Status.VolumesInUse = slices.DeleteFunc(no.Status.VolumesInUse, func(v corev1.UniqueVolumeName) bool { return v == name })
		default:
			return
		}
		_, err = e.kc.CoreV1().Nodes().UpdateStatus(ctx, no, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("node %s status: too many conflicts", n.name)
}

// csiVolumeName is how the kubelet and the attach/detach controller name a CSI volume.
func csiVolumeName(driver, handle string) string {
	return fmt.Sprintf("kubernetes.io/csi/%s^%s", driver, handle)
}

// daemonsOn lists the processes of node n's containers that run program with the argument arg
// (a path of the node): Daemons of the host, in the mount namespace of one of them. Both
// nodes' plugins use the same paths for a volume, so the path alone does not tell them apart.
func (e *env) daemonsOn(n *node, program, arg string) []int {
	e.t.Helper()
	namespaces := map[string]bool{}
	e.runner.mu.Lock()
	var containers []string
	for _, p := range e.runner.procs {
		if p.node == n.name && p.container != "" {
			containers = append(containers, p.container)
		}
	}
	e.runner.mu.Unlock()
	for _, c := range containers {
		pid, err := containerPID(c)
		if err != nil {
			e.t.Fatal(err)
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil {
			e.t.Fatal(err)
		}
		namespaces[ns] = true
	}
	pids, err := hostexec.Daemons("/proc", program, arg)
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.DeleteFunc(pids, func(pid int) bool {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		return err != nil || !namespaces[ns]
	})
}

func TestListenOn(t *testing.T) {
	for in, want := range map[string]string{
		"--metrics-address=:9080":          "--metrics-address=127.0.0.2:9080",
		"--http-endpoint=:9093":            "--http-endpoint=127.0.0.2:9093",
		"--metrics-address=10.0.0.1:9080":  "--metrics-address=10.0.0.1:9080",
		"--metrics-address=$(NODE_IP):908": "--metrics-address=$(NODE_IP):908",
		"--endpoint=unix:///csi/csi.sock":  "--endpoint=unix:///csi/csi.sock",
		"--v=:5x":                          "--v=:5x",
	} {
		if got := listenOn(in, "127.0.0.2"); got != want {
			t.Errorf("listenOn(%q) = %q, want %q", in, got, want)
		}
	}
}
