// Package restart tests that FUSE-backed volumes survive restarts of the node plugin and of the
// mount holder, with the real binaries in container-like process trees (a PID and a mount
// namespace each), real FUSE daemons, loop devices, and writers in mount namespaces of their
// own as pods' containers have.
package restart

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/e2e/localdriver"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/driver"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodestate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	nodeID = "restart-node"
	// noHolderEnv runs the node plugins without a mount holder (FUSE mounts in the plugin, as
	// before the holder existed): how the proof tests are run against the old code.
	noHolderEnv = "MONOCEPH_RESTART_NO_HOLDER"
	// srcEnv names another checkout to build the binaries from (with noHolderEnv: the code
	// before the holder existed, e.g. a worktree of main), for the failing baseline.
	srcEnv = "MONOCEPH_RESTART_SRC"
)

var driverNames = map[string]string{"rbd": driver.DefaultRBDDriverName, "cephfs": driver.DefaultCephFSDriverName}

// bins are the driver binaries this run built: v1 first installed, v2 the upgrade.
var bins struct {
	once   sync.Once
	dir    string
	v1, v2 string
	err    error
}

// ownNamespaceEnv marks the test process that runs in the mount namespace of its own TestMain
// made (see TestMain).
const ownNamespaceEnv = "MONOCEPH_RESTART_OWN_MOUNT_NS"

// TestMain runs the tests in a mount namespace of their own (as root): the volumes they mount
// are then invisible to every other process on the machine, so none can pin them by copying
// its mounts (any process that unshares its mounts on a host whose / is private keeps private
// copies, which hold the volumes' loop devices open; other tests' pods did, failing unstage).
// The namespace lets go of the other tests' mounts it started with, for the same reason the
// other way round.
func TestMain(m *testing.M) {
	if os.Geteuid() == 0 && os.Getenv(ownNamespaceEnv) == "" {
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "slave", "--", os.Args[0]}, os.Args[1:]...)...)
		cmd.Env = append(os.Environ(), ownNamespaceEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
			os.Exit(0)
		case errors.As(err, &ee) && ee.ExitCode() > 0:
			os.Exit(ee.ExitCode())
		default:
			fmt.Fprintln(os.Stderr, "running the tests in a mount namespace of their own:", err)
			os.Exit(1)
		}
	}
	if os.Getenv(ownNamespaceEnv) == "1" && os.Getenv(writerEnv) == "" {
		if out, err := exec.Command("/bin/sh", "-c", cephtest.DropOtherMounts, "sh", "/nonexistent").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "dropping other tests' mounts: %v: %s\n", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// binaries builds monoceph twice, stamped v1 and v2: the second is "a newly built binary" to
// restart with. Building takes a few seconds with a warm cache.
func binaries(t testing.TB) (v1, v2 string) {
	t.Helper()
	bins.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			bins.err = err
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		if src := os.Getenv(srcEnv); src != "" {
			root = src
		}
		if bins.dir, bins.err = os.MkdirTemp("", "mr-bin-"); bins.err != nil {
			return
		}
		for _, v := range []string{"v1", "v2"} {
			bin := filepath.Join(bins.dir, "monoceph-"+v)
			cmd := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/monoceph/monoceph/internal/version.version=restart-"+v, "./cmd/monoceph")
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build: %v: %s", err, out)
				return
			}
		}
		bins.v1, bins.v2 = filepath.Join(bins.dir, "monoceph-v1"), filepath.Join(bins.dir, "monoceph-v2")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.v1, bins.v2
}

// rig is one node: a directory tree shared between every namespace the test makes (the host's
// /var/lib/kubelet and /run/monoceph, which the chart mounts with Bidirectional propagation),
// in-process controllers that create the volumes, and the containers the test starts.
type rig struct {
	t          testing.TB
	cl         cephtest.Cluster
	dir        string
	root       string
	kubelet    string
	state      string
	clusterMap string
	holder     bool
	logs       int
	ctrl       map[string]csi.ControllerClient
}

func newRig(t testing.TB) *rig {
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, FUSE, loop devices")
	}
	for _, cmd := range []string{"unshare", "losetup", "ceph-fuse", "ceph"} {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	binaries(t)
	// short: ceph-fuse admin sockets under the state directory must fit in 107 bytes
	dir, err := os.MkdirTemp("", "mr-")
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, cl: cl, dir: dir, root: filepath.Join(dir, "r"), holder: os.Getenv(noHolderEnv) == "",
		ctrl: map[string]csi.ControllerClient{}}
	r.kubelet, r.state = filepath.Join(r.root, "kubelet"), filepath.Join(r.root, "state")
	for _, d := range []string{r.kubelet, r.state, filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// the shared tree: a mount of its own, shared, so that mounts made in any namespace
	// copied from this one (the containers) show in all of them
	run(t, "mount", "--bind", r.root, r.root)
	run(t, "mount", "--make-rshared", r.root)
	t.Cleanup(func() {
		if t.Failed() {
			r.dumpLogs()
		}
		_ = exec.Command("umount", "--lazy", "--recursive", r.root).Run()
		os.RemoveAll(dir)
	})
	r.clusterMap = cl.ClusterMapFile(t, dir, "")
	for _, typ := range []driver.Type{driver.TypeRBD, driver.TypeCephFS} {
		d := localdriver.Start(t, typ, "")
		r.ctrl[string(typ)] = csi.NewControllerClient(d.Conn)
	}
	return r
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *rig) dumpLogs() {
	logs, _ := filepath.Glob(filepath.Join(r.dir, "logs", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		r.t.Logf("=== %s (tail) ===\n%s", filepath.Base(l), b)
	}
}

// container is a process tree in a PID and a mount namespace of its own, as a container's:
// the binary is the first process of its PID namespace, and everything in the namespace dies
// with it. Its mounts reach the shared tree (and so every other container) by propagation.
type container struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (r *rig) start(name string, env []string, bin string, args ...string) *container {
	r.t.Helper()
	r.logs++
	logf, err := os.Create(filepath.Join(r.dir, "logs", fmt.Sprintf("%02d-%s.log", r.logs, name)))
	if err != nil {
		r.t.Fatal(err)
	}
	// through sh: first let go of other tests' mounts, then exec the binary (PID 1 still)
	argv := append([]string{"--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "unchanged", "--",
		"/bin/sh", "-c", cephtest.DropOtherMounts + `; exec "$@"`, "sh", r.dir, bin}, args...)
	cmd := exec.Command("unshare", argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := &container{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(c.done) }()
	r.t.Cleanup(c.kill)
	return c
}

// kill is kill -9 of the container's whole process group: its first process dies, and the
// kernel kills everything else in its PID namespace.
func (c *container) kill() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.done
}

// stop sends SIGTERM to the container's first process (what the kubelet does) and waits up
// to timeout for the container to end, then kills it.
func (c *container) stop(t testing.TB, timeout time.Duration) {
	t.Helper()
	if pid := c.initPID(); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	select {
	case <-c.done:
	case <-time.After(timeout):
		t.Errorf("container %s did not stop within %v of SIGTERM", c.name, timeout)
		c.kill()
	}
}

func (c *container) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// initPID is the PID (in this namespace) of the container's first process: unshare's child.
func (c *container) initPID() int {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pids := children(c.cmd.Process.Pid); len(pids) > 0 {
			return pids[0]
		}
	}
	return 0
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+2:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			out = append(out, n)
		}
	}
	return out
}

// node is a node plugin of one type and its CSI connection.
type node struct {
	typ  string
	c    *container
	conn *grpc.ClientConn
	csi.NodeClient
	csi.IdentityClient
}

func (r *rig) socket(typ string) string { return filepath.Join(r.dir, typ+".sock") }

func (r *rig) holderEndpoint(typ string) string {
	return "unix://" + filepath.Join(r.state, driverNames[typ], "mounter.sock")
}

// startHolder starts the mount holder of typ and waits for its socket.
func (r *rig) startHolder(typ, bin string, env ...string) *container {
	r.t.Helper()
	c := r.start(typ+"-holder", env, bin, "--type="+typ, "--mode=mounter", "--state-dir="+r.state,
		"--ceph-op-timeout=30s", "--shutdown-grace=20s", "-v=4")
	r.waitFor(c, "holder socket", func() bool {
		_, err := os.Stat(filepath.Join(r.state, driverNames[typ], "mounter.sock"))
		return err == nil
	})
	return c
}

// startNode starts the node plugin of typ and waits until it answers Probe.
func (r *rig) startNode(typ, bin string, env ...string) *node {
	r.t.Helper()
	args := []string{"--type=" + typ, "--mode=node", "--nodeid=" + nodeID, "--endpoint=unix://" + r.socket(typ),
		"--cluster-config=" + r.clusterMap, "--state-dir=" + r.state, "--ceph-op-timeout=30s", "-v=4"}
	if r.holder {
		args = append(args, "--mounter-endpoint="+r.holderEndpoint(typ))
	}
	n := &node{typ: typ, c: r.start(typ+"-node", env, bin, args...)}
	conn, err := grpc.NewClient("unix://"+r.socket(typ), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { conn.Close() })
	n.conn, n.NodeClient, n.IdentityClient = conn, csi.NewNodeClient(conn), csi.NewIdentityClient(conn)
	r.waitFor(n.c, typ+" node plugin", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p, err := n.Probe(ctx, &csi.ProbeRequest{})
		return err == nil && p.GetReady().GetValue()
	})
	return n
}

func (r *rig) waitFor(c *container, what string, ok func() bool) {
	r.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		if c.exited() || time.Now().After(deadline) {
			r.t.Fatalf("%s did not come up (exited: %v)", what, c.exited())
		}
	}
}

// version is the binary version the plugin reports.
func (n *node) version(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := n.GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return info.GetVendorVersion()
}

// volume is a volume created by the in-process controller and the kubelet paths of a pod
// using it.
type volume struct {
	typ     string
	id      string
	context map[string]string
	staging string
	target  string
	cap     *csi.VolumeCapability
}

// createVolume makes a fuse volume of typ, deleted when the test ends.
func (r *rig) createVolume(typ string, size int64) *volume {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	params := map[string]string{"clusterID": r.cl.ID, "mounter": "fuse"}
	if typ == "rbd" {
		params["pool"] = r.cl.RBDPool
	} else {
		params["fsName"] = r.cl.FSName
	}
	mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	vc := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: map[string]string{"rbd": "ext4"}[typ]}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	resp, err := r.ctrl[typ].CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("restart-%s-%d", typ, time.Now().UnixNano()),
		CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeCapabilities: []*csi.VolumeCapability{vc},
		Parameters: params, Secrets: r.cl.Secrets()})
	if err != nil {
		r.t.Fatal(err)
	}
	id := resp.GetVolume().GetVolumeId()
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for {
			_, err := r.ctrl[typ].DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: r.cl.Secrets()})
			if err == nil || ctx.Err() != nil {
				return
			}
			time.Sleep(time.Second) // an image still watched a moment after its unstage
		}
	})
	h := fmt.Sprintf("%x", sha256.Sum256([]byte(id)))
	v := &volume{typ: typ, id: id, context: resp.GetVolume().GetVolumeContext(), cap: vc,
		staging: filepath.Join(r.kubelet, "plugins/kubernetes.io/csi", driverNames[typ], h, "globalmount"),
		target:  filepath.Join(r.kubelet, "pods", "pod-"+h[:12], "volumes/kubernetes.io~csi", "pv-"+h[:12], "mount")}
	for _, d := range []string{v.staging, filepath.Dir(v.target)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			r.t.Fatal(err)
		}
	}
	return v
}

func (r *rig) stage(n *node, v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := n.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging,
		VolumeCapability: v.cap, Secrets: r.cl.Secrets(), VolumeContext: v.context})
	return err
}

func (r *rig) publish(n *node, v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := n.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging,
		TargetPath: v.target, VolumeCapability: v.cap, VolumeContext: v.context})
	return err
}

func (r *rig) unpublish(n *node, v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := n.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target})
	return err
}

func (r *rig) unstage(n *node, v *volume) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := n.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
	return err
}

// mustStagePublish stages and publishes v, retrying what a restarting plugin refuses.
func (r *rig) mustStagePublish(n *node, v *volume) {
	r.t.Helper()
	if err := r.asCO(func() error { return r.stage(n, v) }); err != nil {
		r.t.Fatalf("stage %s: %v", v.typ, err)
	}
	if err := r.asCO(func() error { return r.publish(n, v) }); err != nil {
		r.t.Fatalf("publish %s: %v", v.typ, err)
	}
}

// asCO runs call again, for up to a minute, while the plugin answers ABORTED, as the kubelet
// does: a plugin that has just started first recovers the volumes it had (Recover holds a
// volume's lock for that time), and a call that meets the recovery answers ABORTED without
// doing anything (CI, 2026-11-29: an unstage that TestPluginKilledDuringStageUnstage expected
// to kill the plugin answered "an operation (Recover) on ... is already in progress").
func (r *rig) asCO(call func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := call()
		if status.Code(err) != codes.Aborted || time.Now().After(deadline) {
			return err
		}
		r.t.Logf("%v; retrying", err)
		time.Sleep(time.Second)
	}
}

// workDir is the volume's work directory in the node state directory.
func (r *rig) workDir(v *volume) string {
	return nodestate.WorkDir(filepath.Join(r.state, driverNames[v.typ]), v.id)
}

// loopDevice is the device mounted at an RBD volume's staging path.
func (r *rig) loopDevice(v *volume) string {
	r.t.Helper()
	m, err := hostmount.MountAt(v.staging)
	if err != nil || m == nil {
		r.t.Fatalf("nothing mounted at %s: %v", v.staging, err)
	}
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", m.Major, m.Minor))
	if err != nil {
		r.t.Fatal(err)
	}
	return filepath.Base(link)
}

// mdsSession is the CephFS client ID of the ceph-fuse daemon of a volume, from its admin
// socket (a new daemon is a new session), and the number of ceph-fuse daemons of the node.
func (r *rig) mdsSession(v *volume) (int64, int, error) {
	asok := filepath.Join(r.workDir(v), "ceph-fuse.asok")
	cmd := exec.Command("ceph", "--admin-daemon", asok, "status")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("ceph-fuse admin socket %s: %w", asok, err)
	}
	var st struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, 0, fmt.Errorf("status: %w: %s", err, out)
	}
	return st.ID, len(daemonsUnder(r.state)), nil
}

// daemonsUnder lists the ceph-fuse processes whose admin socket is under dir.
func daemonsUnder(dir string) []int {
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(argv[0]) != "ceph-fuse" {
			continue
		}
		for _, a := range argv {
			if strings.HasPrefix(a, "--admin_socket="+dir+"/") {
				n, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// assertNothingLeft fails when a volume left anything on the node: a FUSE daemon, a mount
// under the shared tree, a loop device on one of its files, a work directory.
func (r *rig) assertNothingLeft(vols ...*volume) {
	r.t.Helper()
	if pids := daemonsUnder(r.state); len(pids) > 0 {
		r.t.Errorf("ceph-fuse daemons left: %v", pids)
	}
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], r.root+"/") {
			r.t.Errorf("mount left: %s", line)
		}
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range backing {
		b, _ := os.ReadFile(p)
		for _, v := range vols {
			if strings.Contains(string(b), filepath.Base(r.workDir(v))) || strings.Contains(string(b), r.root) {
				r.t.Errorf("loop device left: %s = %s", p, strings.TrimSpace(string(b)))
			}
		}
	}
	for _, v := range vols {
		if _, err := os.Stat(r.workDir(v)); err == nil {
			entries, _ := os.ReadDir(r.workDir(v))
			r.t.Errorf("work directory of %s left: %v", v.typ, entries)
		}
	}
}

// lines reads a child's output lines that start with prefix into a channel.
func lines(rd io.Reader, prefix string) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(rd)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				ch <- l
			}
		}
		close(ch)
	}()
	return ch
}
