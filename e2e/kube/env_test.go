package kube

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/kubetest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
)

const (
	release   = "monoceph"
	namespace = "monoceph"
	rbdDriver = "rbd.monoceph.io"
	fsDriver  = "cephfs.monoceph.io"
)

// env is everything the end-to-end steps share.
type env struct {
	t       *testing.T
	ceph    cephtest.Cluster
	cp      *kubetest.ControlPlane
	kc      kubernetes.Interface
	dyn     dynamic.Interface
	snap    snapclient.Interface
	bin     string // directory of the binaries make built
	repo    string // repository root
	runner  *podRunner
	adminKC string // admin kubeconfig file
	ports   map[string]int
	nodes   map[string]*node // see nodes_test.go
}

// binaries the e2e test runs; make e2e builds them all into MONOCEPH_E2E_BIN.
var binaries = []string{"monoceph", "helm", "kubectl", "csi-provisioner", "csi-attacher", "csi-snapshotter", "snapshot-controller",
	"csi-resizer", "csi-addons-manager", "csi-addons-sidecar"}

func newEnv(t *testing.T) *env {
	bin := os.Getenv("MONOCEPH_E2E_BIN")
	if bin == "" {
		if os.Getenv("MONOCEPH_E2E") == "1" {
			t.Fatal("MONOCEPH_E2E=1 but MONOCEPH_E2E_BIN is unset: run make e2e")
		}
		t.Skip("end-to-end test: run make e2e (needs the local Ceph cluster and the binaries it builds)")
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%v: run make e2e-tools", err)
		}
	}
	e := &env{t: t, ceph: cephtest.Env(t), bin: bin}
	if e.ceph.RBDPool != "rbd" || e.ceph.FSName != "myfs" {
		t.Fatalf("the README's install names pool rbd and filesystem myfs; this cluster has %s and %s", e.ceph.RBDPool, e.ceph.FSName)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	e.repo = repo
	e.cp = kubetest.Start(t, kubetest.Options{ControllerManager: true})
	e.kc = kubernetes.NewForConfigOrDie(e.cp.Admin)
	e.dyn = dynamic.NewForConfigOrDie(e.cp.Admin)
	e.snap = snapclient.NewForConfigOrDie(e.cp.Admin)
	e.adminKC = e.cp.Kubeconfig(t, e.cp.AdminToken)
	e.ports = map[string]int{}
	for _, p := range []string{"rbdControllerMetrics", "rbdNodeMetrics", "rbdCSIAddons", "rbdSnapshotMetadata",
		"fsControllerMetrics", "fsNodeMetrics", "fsCSIAddons", "rbdProvisioner", "rbdSnapshotter", "rbdResizer",
		"fsProvisioner", "fsSnapshotter", "fsResizer", "rbdAttacher", "rbdMounterMetrics", "fsMounterMetrics"} {
		e.ports[p] = kubetest.FreePort(t)
	}
	// short: FUSE admin sockets live below the node plugin's state directory (107-byte limit)
	root, err := os.MkdirTemp("", "k8s-")
	if err != nil {
		t.Fatal(err)
	}
	removeStale(t)
	e.checkLeftovers()
	e.nodes = newNodes(t, root)
	e.runner = &podRunner{t: t, cp: e.cp, kc: e.kc, nodes: e.nodes, root: root, running: map[string]bool{},
		podman: map[string]bool{"monoceph": true},
		images: map[string]string{
			"csi-provisioner": filepath.Join(bin, "csi-provisioner"),
			"csi-attacher":    filepath.Join(bin, "csi-attacher"),
			"csi-snapshotter": filepath.Join(bin, "csi-snapshotter"),
			"csi-resizer":     filepath.Join(bin, "csi-resizer"),
			"k8s-sidecar":     filepath.Join(bin, "csi-addons-sidecar"),
		},
		skip: map[string]string{
			"csi-node-driver-registrar": "it only registers the plugin with the kubelet, and there is none (the test calls the node service itself)",
		},
	}
	// registered before any process starts, so it runs after they were stopped: logs are
	// complete, and nothing remounts what is detached here
	t.Cleanup(func() {
		if t.Failed() {
			e.runner.dumpLogs()
			e.events()
		}
		unmountBelow(t, root)
		os.RemoveAll(root)
	})
	makeShared(t, root)
	return e
}

// events prints the cluster's events (on failure): what the controllers and sidecars reported.
func (e *env) events() {
	list, err := e.kc.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Logf("events: %v", err)
		return
	}
	var b strings.Builder
	for _, ev := range list.Items {
		fmt.Fprintf(&b, "%s %s/%s %s: %s\n", ev.Type, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
	e.t.Logf("=== events ===\n%s", b.String())
}

// waitFor polls cond every 250 ms until it holds or timeout passes; cond's detail says what
// it saw last, for the failure message.
func (e *env) waitFor(timeout time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		e.runner.check(e.t)
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %v waiting for %s; last seen: %s", timeout, what, detail)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// shell runs a bash script with the environment of a user of the local cluster: the admin
// kubeconfig, the binaries on PATH and the Ceph variables; it returns stdout.
func (e *env) shell(script string, extraEnv ...string) string {
	e.t.Helper()
	out, err := e.shellErr(script, extraEnv...)
	if err != nil {
		e.t.Fatalf("%s\n: %v", script, err)
	}
	return out
}

// shellErr is shell for callers that handle the failure (and may run it in a goroutine).
func (e *env) shellErr(script string, extraEnv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = e.repo
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.adminKC, "PATH="+e.bin+":"+os.Getenv("PATH"))
	cmd.Env = append(cmd.Env, extraEnv...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%v\nstdout: %s\nstderr: %s", err, out.String(), stderr.String())
	}
	return out.String(), nil
}

// ceph runs a ceph or rbd command against the local cluster and returns stdout.
func (e *env) cephCmd(args ...string) (string, error) { return e.cephCmdEnv(nil, args...) }

// cephCmdEnv is cephCmd with more environment variables.
func (e *env) cephCmdEnv(env []string, args ...string) (string, error) {
	return e.cephCmdWithin(time.Minute, env, args...)
}

// cephCmdWithin is cephCmdEnv bounded by d: a wait that polls the cluster gets more than one
// try even when one command hangs.
func (e *env) cephCmdWithin(d time.Duration, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out.String(), err
}

// listsEntry reports whether `ceph osd blocklist ls` output lists entry (an address, or a range
// as <network>:0/<prefix>, which Ceph lists as cidr:<network>:0/<prefix>) as an entry of its
// own: a substring test would also find the range 127.0.0.2:0/32 inside a client's entry
// 127.0.0.2:0/3243308824 (its nonce), which librbd adds when another node breaks the
// client's exclusive lock.
func listsEntry(out, entry string) bool { return slices.Contains(blocklistEntries(out), entry) }

// blocklistEntries are the entries `ceph osd blocklist ls` output lists (clients, and ranges
// without their cidr: prefix), in its order.
func blocklistEntries(out string) []string {
	var entries []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			entries = append(entries, strings.TrimPrefix(f[0], "cidr:"))
		}
	}
	return entries
}

// readmeBlock returns the shell commands of the README's fenced block after the marker
// <!-- e2e:name -->: the test runs the documented commands themselves.
func (e *env) readmeBlock(name string) string {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.repo, "README.md"))
	if err != nil {
		e.t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- e2e:" + regexp.QuoteMeta(name) + " -->\\s*```(?:sh|bash)\n(.*?)```")
	m := re.FindSubmatch(b)
	if m == nil {
		e.t.Fatalf("README.md has no block marked <!-- e2e:%s -->", name)
	}
	return string(m[1])
}

// unmountBelow detaches every mount under dir, deepest first, so removing dir cannot reach
// into a FUSE-mounted volume.
func unmountBelow(t *testing.T, dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Log(err)
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := exec.Command("umount", "-l", points[i]).Run(); err != nil {
			t.Logf("umount %s: %v", points[i], err)
		}
	}
	// loop devices of RBD fuse volumes a failed step left staged
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.HasPrefix(string(b), dir+"/") {
			dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
			if err := exec.Command("losetup", "-d", dev).Run(); err != nil {
				t.Logf("losetup -d %s: %v", dev, err)
			}
		}
	}
}
