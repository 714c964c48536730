package kube

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/kubetest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// podRunner stands in for the scheduler and the kubelets of the test's nodes (nodes_test.go):
// it binds pods the controllers created from the chart to a node, and runs their containers
// with the pods' real arguments, environment and service account. monoceph's containers run
// with podman from the image make built (podman_test.go), each node's hostPath volumes below
// that node's root directory; the sidecars' images map to binaries built by make, run as local
// processes whose volume mount paths in arguments map to local directories and which get the
// pod's service account the way a pod does (in-cluster configuration: the token files at the
// well-known path, in a private mount namespace). Either way the chart's RBAC is what they run
// with.
type podRunner struct {
	t      *testing.T
	cp     *kubetest.ControlPlane
	kc     kubernetes.Interface
	nodes  map[string]*node
	root   string            // holds the pods' directories and logs
	podman map[string]bool   // image names (last path element, no tag) run as containers
	images map[string]string // image name → binary run as a local process
	skip   map[string]string // image name → why it cannot run here

	mu      sync.Mutex
	procs   []*process
	running map[string]bool // pods run (once: a pod name is never reused)
}

// process is a container's process, and the pod it belongs to ("" for cluster components).
type process struct {
	*kubetest.Process
	pod       string
	container string // podman's name for it, when the process is `podman run`
	uid       int64  // the user the container runs as
	started   time.Time
	job       bool   // restartPolicy Never: the pod ends when the process does
	node      string // the node it runs on ("" for cluster components)
}

// hostPaths are shared with the real host: device nodes, sysfs and kernel modules.
var hostPaths = map[string]bool{"/dev": true, "/sys": true, "/lib/modules": true}

// run binds pod to its node (see nodeOf), marks it running and ready at the node's address
// (pods not on the host network at 127.0.0.1: all pod networks are the host's here) and
// starts its containers.
func (r *podRunner) run(t *testing.T, ctx context.Context, pod *corev1.Pod) {
	t.Helper()
	n := r.nodeOf(pod)
	if pod.Spec.NodeName == "" {
		err := r.kc.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: n.name},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("bind pod %s: %v", pod.Name, err)
		}
	}
	r.mu.Lock()
	r.running[pod.Name] = true
	r.mu.Unlock()
	var err error
	if pod, err = r.kc.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	podIP := "127.0.0.1"
	if pod.Spec.HostNetwork {
		podIP = n.ip
	}
	pod.Status.Phase = corev1.PodRunning
	pod.Status.HostIP, pod.Status.PodIP = n.ip, podIP
	pod.Status.HostIPs, pod.Status.PodIPs = []corev1.HostIP{{IP: n.ip}}, []corev1.PodIP{{IP: podIP}}
	pod.Status.StartTime = &now
	// ready at once: the test checks the probes itself; rollouts wait for ready pods
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if pod, err = r.kc.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", pod.Name, err)
	}

	podDir := filepath.Join(r.root, "pods", pod.Name)
	volumes := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = r.volume(t, ctx, pod, n, podDir, v)
	}
	saDir := r.serviceAccount(t, ctx, pod, podDir)
	for _, c := range pod.Spec.Containers {
		image := imageName(c.Image)
		if why, ok := r.skip[image]; ok {
			t.Logf("pod %s: container %s not run: %s", pod.Name, c.Name, why)
			continue
		}
		if pod.Spec.HostNetwork {
			c.Args = slices.Clone(c.Args)
			for i, a := range c.Args {
				c.Args[i] = listenOn(a, n.ip)
			}
		}
		var p *process
		if r.podman[image] {
			env := r.env(t, pod, c, r.kubeEnv())
			maps.Copy(env, n.env)
			p = r.startContainer(t, pod, c, env, volumes, saDir, n.files)
		} else {
			bin, ok := r.images[image]
			if !ok {
				t.Fatalf("pod %s: container %s: no local binary for image %s", pod.Name, c.Name, c.Image)
			}
			env := r.env(t, pod, c, r.clusterEnv())
			maps.Copy(env, n.env)
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = rewritePaths(expand(a, env), c.VolumeMounts, volumes)
			}
			p = r.start(t, pod.Name, fmt.Sprintf("%s/%s", pod.Name, c.Name), bin, args, env, saDir)
		}
		p.job, p.node = pod.Spec.RestartPolicy == corev1.RestartPolicyNever, n.name
	}
}

// started reports whether run ran the pod.
func (r *podRunner) started(pod string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[pod]
}

// finishJobs marks the pods whose containers ran to completion (restartPolicy Never, a Job's)
// Succeeded or Failed, as the kubelet does, so their Job completes.
func (r *podRunner) finishJobs(t *testing.T, ctx context.Context) {
	r.mu.Lock()
	var done []*process
	for _, p := range r.procs {
		if exited, _ := p.Exited(); p.job && exited {
			done = append(done, p)
		}
	}
	r.procs = slices.DeleteFunc(r.procs, func(p *process) bool { return slices.Contains(done, p) })
	r.mu.Unlock()
	for _, p := range done {
		_, err := p.Exited()
		pod, gerr := r.kc.CoreV1().Pods(namespace).Get(ctx, p.pod, metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		code, phase := int32(0), corev1.PodSucceeded
		if err != nil {
			code, phase = 1, corev1.PodFailed
			t.Logf("pod %s failed: %v; log:\n%s", p.pod, err, p.Tail(2000))
		}
		pod.Status.Phase = phase
		pod.Status.Conditions = nil
		for _, c := range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: string(phase)}}})
		}
		if _, err := r.kc.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("pod %s status: %v", p.pod, err)
		}
	}
}

// volume prepares a local directory for one pod volume; hostPath volumes are below the
// node's root.
func (r *podRunner) volume(t *testing.T, ctx context.Context, pod *corev1.Pod, n *node, podDir string, v corev1.Volume) string {
	dir := filepath.Join(podDir, "volumes", v.Name)
	files := map[string][]byte{}
	mode := os.FileMode(0o755)
	switch {
	case v.EmptyDir != nil:
		mode = 0o777
	case v.HostPath != nil:
		if _, err := os.Stat(v.HostPath.Path); err == nil && hostPaths[v.HostPath.Path] {
			return v.HostPath.Path
		}
		// one this host lacks (/lib/modules in a VM without modules) is an empty directory,
		// as the container runtime would create it
		dir = filepath.Join(n.root, v.HostPath.Path)
	case v.ConfigMap != nil:
		cm, err := r.kc.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s volume %s: %v", pod.Name, v.Name, err)
		}
		for k, s := range cm.Data {
			files[k] = []byte(s)
		}
	case v.Secret != nil:
		s, err := r.kc.CoreV1().Secrets(pod.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s volume %s: %v", pod.Name, v.Name, err)
		}
		files = s.Data
	default:
		t.Fatalf("pod %s volume %s: unsupported volume type", pod.Name, v.Name)
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	for k, b := range files {
		if err := os.WriteFile(filepath.Join(dir, k), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// serviceAccount writes the token, CA and namespace files a pod's containers find at
// /var/run/secrets/kubernetes.io/serviceaccount, or returns "" when the pod opts out.
func (r *podRunner) serviceAccount(t *testing.T, ctx context.Context, pod *corev1.Pod, podDir string) string {
	if a := pod.Spec.AutomountServiceAccountToken; a != nil && !*a {
		return ""
	}
	sa, err := r.kc.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, pod.Spec.ServiceAccountName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s: service account: %v", pod.Name, err)
	}
	if a := sa.AutomountServiceAccountToken; a != nil && !*a {
		return ""
	}
	return r.serviceAccountFiles(t, filepath.Join(podDir, "serviceaccount"), r.cp.Token(t, pod.Namespace, pod.Spec.ServiceAccountName), pod.Namespace)
}

// serviceAccountFiles writes what in-cluster clients read at the service account path (token,
// the cluster's CA, the namespace) into dir and returns it, for start's saDir. The files are
// 0644, as the kubelet's projected volume makes them, so a non-root container reads them (the
// test's root directory keeps them from other users).
func (r *podRunner) serviceAccountFiles(t *testing.T, dir, token, namespace string) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(token), "ca.crt": r.cp.CA.CertPEM, "namespace": []byte(namespace)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// kubeEnv holds the variables in-cluster clients find the API server by, which the kubelet
// gives every container.
func (r *podRunner) kubeEnv() map[string]string {
	return map[string]string{"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": fmt.Sprint(r.cp.Port)}
}

// clusterEnv is the environment every local process starts from: kubeEnv, and the test's PATH
// and HOME (a container has its image's).
func (r *podRunner) clusterEnv() map[string]string {
	env := r.kubeEnv()
	env["PATH"], env["HOME"] = os.Getenv("PATH"), os.Getenv("HOME")
	return env
}

// env resolves a container's environment the way the kubelet does for the fields the chart
// uses, on top of base.
func (r *podRunner) env(t *testing.T, pod *corev1.Pod, c corev1.Container, base map[string]string) map[string]string {
	env := base
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v, ok := map[string]string{
				"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "metadata.uid": string(pod.UID),
				"spec.nodeName": pod.Spec.NodeName, "spec.serviceAccountName": pod.Spec.ServiceAccountName,
				"status.podIP": pod.Status.PodIP, "status.hostIP": pod.Status.HostIP,
			}[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("pod %s container %s: env %s: unsupported fieldRef %s", pod.Name, c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = v
		default:
			t.Fatalf("pod %s container %s: env %s: unsupported source", pod.Name, c.Name, e.Name)
		}
	}
	return env
}

// start runs one container's binary; with saDir it runs in a private mount namespace where
// saDir is bind-mounted at the in-cluster service account path. A nil env is the test's own.
func (r *podRunner) start(t *testing.T, pod, name, bin string, args []string, env map[string]string, saDir string) *process {
	logPath := filepath.Join(r.root, "logs", strings.ReplaceAll(name, "/", "_")+".log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{bin}, args...)
	if saDir != "" {
		const saPath = "/run/secrets/kubernetes.io/serviceaccount"
		if err := os.MkdirAll(saPath, 0o755); err != nil {
			t.Fatal(err)
		}
		argv = append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" ` + saPath + ` && exec "$@"`, saDir}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	p := &process{Process: kubetest.StartProcess(t, name, logPath, cmd), pod: pod, started: time.Now()}
	r.mu.Lock()
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	// the processes live as long as the whole test, not the step that started them
	r.t.Cleanup(func() { p.stop(r.t) })
	return p
}

// stop ends a container as the kubelet does, with a grace period (podman run passes the
// SIGTERM on to the container, and removes it once it ended).
func (p *process) stop(t *testing.T) {
	p.Stop(10 * time.Second)
	if p.container != "" {
		if err := removeContainer(p.container); err != nil {
			t.Error(err)
		}
	}
}

// stopPod stops the containers of one pod (the kubelet's part of a pod deletion).
func (r *podRunner) stopPod(name string) {
	r.mu.Lock()
	var procs []*process
	kept := r.procs[:0]
	for _, p := range r.procs {
		if p.pod == name {
			procs = append(procs, p)
		} else {
			kept = append(kept, p)
		}
	}
	r.procs = kept
	r.mu.Unlock()
	for _, p := range procs {
		p.stop(r.t)
	}
}

// check fails t when a container exited, with its log.
func (r *podRunner) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if exited, err := p.Exited(); exited && !p.job {
			t.Fatalf("container %s exited (%v); log tail:\n%s", p.Name, err, p.Tail(4000))
		}
	}
}

// denied returns the log lines in which a component was refused by the API server's RBAC.
func (r *podRunner) denied() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, p := range r.procs {
		b, err := os.ReadFile(p.Log)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "is forbidden") {
				out = append(out, p.Name+": "+line)
			}
		}
	}
	return out
}

// dumpLogs prints the tail of every container log (on failure).
func (r *podRunner) dumpLogs() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		r.t.Logf("=== %s log (tail) ===\n%s", p.Name, p.Tail(3000))
	}
}

// imageName is the last path element of an image reference without tag or digest.
func imageName(ref string) string {
	ref = path.Base(ref)
	if i := strings.IndexAny(ref, ":@"); i >= 0 {
		ref = ref[:i]
	}
	return ref
}

// expand replaces $(VAR) with defined variables as the kubelet does; $$ escapes a $.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "$$"):
			b.WriteByte('$')
			i++
		case strings.HasPrefix(s[i:], "$("):
			if end := strings.IndexByte(s[i:], ')'); end > 0 {
				if v, ok := env[s[i+2:i+end]]; ok {
					b.WriteString(v)
					i += end
					continue
				}
			}
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// rewritePaths maps container paths under a volume mount to the volume's local directory;
// the longest mount path wins.
func rewritePaths(arg string, mounts []corev1.VolumeMount, volumes map[string]string) string {
	sorted := append([]corev1.VolumeMount(nil), mounts...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i].MountPath) > len(sorted[j].MountPath) })
	for _, m := range sorted {
		local := volumes[m.Name]
		if local == "" || local == m.MountPath {
			continue
		}
		for i := strings.Index(arg, m.MountPath); i >= 0; {
			end := i + len(m.MountPath)
			if end == len(arg) || arg[end] == '/' {
				return arg[:i] + local + arg[end:]
			}
			next := strings.Index(arg[end:], m.MountPath)
			if next < 0 {
				break
			}
			i = end + next
		}
	}
	return arg
}
