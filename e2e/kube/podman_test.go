package kube

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Containers of images listed in podRunner.podman run with podman from the local image store
// (`make image` builds the chart's default image), the way a kubelet with a CRI runtime runs
// them: the pod's arguments and environment, its volumes bind-mounted at their mount paths with
// their propagation, its security context, the host network.

// saMountPath is where in-cluster clients read the service account token.
const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// e2eLabel marks the test's containers with the test process's PID, so a later run removes
// containers of a run that died without its cleanups.
const e2eLabel = "io.monoceph.e2e-pid"

// podmanRun returns the arguments of `podman run` for container c of pod: name is the
// container's name in podman, volumes the local directory of every pod volume, saDir the
// service account files ("" for none), files host files the container sees read-only at the
// same path (what the node gives its processes, such as the source address shim).
func podmanRun(pod *corev1.Pod, c corev1.Container, name string, env map[string]string, volumes map[string]string, saDir string, files []string) ([]string, error) {
	args := []string{"run", "--rm", "--name", name, "--label", fmt.Sprintf("%s=%d", e2eLabel, os.Getpid()),
		"--pull", "never", "--network", "host"}
	sec, err := securityArgs(pod.Spec.SecurityContext, c.SecurityContext)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	args = append(args, sec...)
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "--env", k+"="+env[k])
	}
	for _, m := range c.VolumeMounts {
		src, ok := volumes[m.Name]
		if !ok {
			return nil, fmt.Errorf("container %s: volume mount %s names no volume of the pod", c.Name, m.Name)
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			return nil, fmt.Errorf("container %s: volume mount %s: subPath is not supported here", c.Name, m.Name)
		}
		opts := []string{"rprivate"}
		if m.MountPropagation != nil {
			switch *m.MountPropagation {
			case corev1.MountPropagationBidirectional:
				opts = []string{"rshared"}
			case corev1.MountPropagationHostToContainer:
				opts = []string{"rslave"}
			}
		}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		args = append(args, "--volume", src+":"+m.MountPath+":"+strings.Join(opts, ","))
	}
	if saDir != "" {
		args = append(args, "--volume", saDir+":"+saMountPath+":ro")
	}
	for _, f := range files {
		args = append(args, "--volume", f+":"+f+":ro")
	}
	if c.WorkingDir != "" {
		args = append(args, "--workdir", c.WorkingDir)
	}
	if len(c.Command) > 0 {
		b, _ := json.Marshal(c.Command)
		args = append(args, "--entrypoint", string(b))
	}
	args = append(args, c.Image)
	for _, a := range c.Args {
		args = append(args, expand(a, env))
	}
	return args, nil
}

// securityArgs maps the fields of the pod's and the container's security contexts the chart
// uses (the container's win); any other field fails, so the test never runs a container with
// less confinement than the chart asks for.
func securityArgs(pod *corev1.PodSecurityContext, c *corev1.SecurityContext) ([]string, error) {
	var uid, gid *int64
	var nonRoot *bool
	var seccomp *corev1.SeccompProfile
	if pod != nil {
		rest := *pod
		uid, gid, nonRoot, seccomp = rest.RunAsUser, rest.RunAsGroup, rest.RunAsNonRoot, rest.SeccompProfile
		rest.RunAsUser, rest.RunAsGroup, rest.RunAsNonRoot, rest.SeccompProfile = nil, nil, nil, nil
		if !reflect.ValueOf(rest).IsZero() {
			return nil, fmt.Errorf("unsupported pod securityContext fields: %+v", rest)
		}
	}
	var args []string
	if c != nil {
		rest := *c
		if rest.RunAsUser != nil {
			uid = rest.RunAsUser
		}
		if rest.RunAsGroup != nil {
			gid = rest.RunAsGroup
		}
		if rest.RunAsNonRoot != nil {
			nonRoot = rest.RunAsNonRoot
		}
		if rest.SeccompProfile != nil {
			seccomp = rest.SeccompProfile
		}
		if p := rest.Privileged; p != nil && *p {
			args = append(args, "--privileged")
		}
		if caps := rest.Capabilities; caps != nil {
			for _, d := range caps.Drop {
				args = append(args, "--cap-drop", string(d))
			}
			for _, a := range caps.Add {
				args = append(args, "--cap-add", string(a))
			}
		}
		if r := rest.ReadOnlyRootFilesystem; r != nil && *r {
			// the kubelet mounts no tmpfs of its own on a read-only root; the chart's volumes do
			args = append(args, "--read-only", "--read-only-tmpfs=false")
		}
		if a := rest.AllowPrivilegeEscalation; a != nil && !*a {
			args = append(args, "--security-opt", "no-new-privileges")
		}
		rest.RunAsUser, rest.RunAsGroup, rest.RunAsNonRoot, rest.SeccompProfile = nil, nil, nil, nil
		rest.Privileged, rest.Capabilities, rest.ReadOnlyRootFilesystem, rest.AllowPrivilegeEscalation = nil, nil, nil, nil
		if !reflect.ValueOf(rest).IsZero() {
			return nil, fmt.Errorf("unsupported securityContext fields: %+v", rest)
		}
	}
	if seccomp != nil && seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		return nil, fmt.Errorf("unsupported seccomp profile %s", seccomp.Type)
	}
	if nonRoot != nil && *nonRoot && (uid == nil || *uid == 0) {
		// the kubelet refuses it too (this runner does not read the image's USER)
		return nil, fmt.Errorf("runAsNonRoot without a non-zero runAsUser")
	}
	if uid != nil {
		user := strconv.FormatInt(*uid, 10)
		if gid != nil {
			user += ":" + strconv.FormatInt(*gid, 10)
		}
		args = append(args, "--user", user)
	}
	return args, nil
}

// startContainer runs a pod's container with podman; the process it adds and returns is the
// attached `podman run`, whose end is the container's.
func (r *podRunner) startContainer(t *testing.T, pod *corev1.Pod, c corev1.Container, env, volumes map[string]string, saDir string, files []string) *process {
	if out, err := exec.Command("podman", "image", "exists", c.Image).CombinedOutput(); err != nil {
		t.Fatalf("pod %s: image %s is not in podman's local storage (%v %s): run make image", pod.Name, c.Image, err, out)
	}
	name := fmt.Sprintf("e2e-%s-%s-%s", filepath.Base(r.root), pod.Name, c.Name)
	args, err := podmanRun(pod, c, name, env, volumes, saDir, files)
	if err != nil {
		t.Fatalf("pod %s: %v", pod.Name, err)
	}
	p := r.start(t, pod.Name, pod.Name+"/"+c.Name, "podman", args, nil, "")
	p.container = name
	// the image's default user is root; the security context picks another
	if sc := pod.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		p.uid = *sc.RunAsUser
	}
	if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil {
		p.uid = *sc.RunAsUser
	}
	return p
}

// checkUser fails t unless the container's first process runs as the user its security
// context asks for.
func checkUser(t *testing.T, p *process) {
	t.Helper()
	pid, err := containerPID(p.container)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		// Uid: real, effective, saved, filesystem
		if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
			if want := strconv.FormatInt(p.uid, 10); f[1] != want || f[2] != want {
				t.Fatalf("container %s runs as uid %s/%s, want %s", p.Name, f[1], f[2], want)
			}
			return
		}
	}
	t.Fatalf("container %s: no Uid line in /proc status", p.Name)
}

// containerPID is the host's PID of a running container's first process.
func containerPID(name string) (int, error) {
	out, err := exec.Command("podman", "inspect", "--format", "{{.State.Pid}}", name).Output()
	if err != nil {
		return 0, fmt.Errorf("podman inspect %s: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("podman inspect %s: pid %q", name, out)
	}
	return pid, nil
}

// removeContainer removes a container that outlived its `podman run` (killed after the
// grace period); a container already gone is fine.
func removeContainer(name string) error {
	out, err := exec.Command("podman", "rm", "--force", "--time", "0", "--ignore", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman rm %s: %v: %s", name, err, out)
	}
	return nil
}

// removeStale removes containers of earlier runs whose test process is gone (killed before
// its cleanups ran).
func removeStale(t *testing.T) {
	t.Helper()
	out, err := exec.Command("podman", "ps", "--all", "--filter", "label="+e2eLabel,
		"--format", `{{.Names}} {{index .Labels "`+e2eLabel+`"}}`).Output()
	if err != nil {
		t.Fatalf("podman ps: %v (make image installs and configures podman)", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if pid, err := strconv.Atoi(f[1]); err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			t.Logf("removing container %s of an earlier run (process %d is gone)", f[0], pid)
			if err := removeContainer(f[0]); err != nil {
				t.Log(err)
			}
		}
	}
}

// makeShared bind-mounts dir onto itself as a shared mount, as the kubelet does with its root
// directory: mounts the node plugin makes in its container under a Bidirectional volume then
// reach the host (podman refuses rshared volumes from a private mount).
func makeShared(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{{"--bind", dir, dir}, {"--make-rshared", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
}

// socketReady waits for a unix socket a container creates, logs how long after the
// container's start it appeared, and checks the user the container runs as.
func (r *podRunner) socketReady(t *testing.T, pod, sock string, timeout time.Duration) {
	t.Helper()
	r.mu.Lock()
	var started time.Time
	var containers []*process
	for _, p := range r.procs {
		if p.pod == pod && p.container != "" {
			started, containers = p.started, append(containers, p)
		}
	}
	r.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%s: no socket %s after %v: %v", pod, sock, timeout, err)
		}
		r.check(t)
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range containers {
		t.Logf("%s: CSI socket ready %.2f s after `podman run` started", p.Name, time.Since(started).Seconds())
		checkUser(t, p)
	}
}
