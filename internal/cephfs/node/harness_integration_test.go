package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/cephfs"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/oplock"
)

// testNode is one node plugin against the local cluster: its own state directory, locks and
// directory for staging and target paths, all cleaned up (mounts and daemons too) even when
// the test fails.
type testNode struct {
	*Server
	env  cephtest.Cluster
	dir  string // staging and target paths go here
	name string
}

func newTestNode(t testing.TB, env cephtest.Cluster, name string) *testNode {
	t.Helper()
	clusters := env.Clusters(t, "")
	state := stateDir(t)
	s, err := New(Options{NodeID: name, StateDir: state, Clusters: clusters, Locks: oplock.New(), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{Server: s, env: env, dir: t.TempDir(), name: name}
	t.Cleanup(func() { cleanupMounts(t, n.dir, state) })
	return n
}

// cleanupMounts detaches everything mounted under dir and stops the ceph-fuse daemons whose
// admin socket is under stateDir.
func cleanupMounts(t testing.TB, dir, stateDir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	var points []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	slices.Sort(points)
	slices.Reverse(points) // deepest first
	for _, p := range points {
		// a clean unmount first: a daemon that exits by itself hands its capabilities back,
		// one that is killed leaves them blocked at the MDS for a minute
		if exec.Command("umount", p).Run() == nil {
			continue
		}
		if out, err := exec.Command("umount", "-l", p).CombinedOutput(); err != nil {
			t.Errorf("cleanup: umount -l %s: %v: %s", p, err, out)
		}
	}
	daemons := func() []int {
		var pids []int
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.HasPrefix(cmdline, []byte("ceph-fuse\x00")) && bytes.Contains(cmdline, []byte("--admin_socket="+stateDir+"/")) {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	for deadline := time.Now().Add(3 * time.Second); len(daemons()) > 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range daemons() {
		t.Logf("cleanup: killing ceph-fuse %d", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func (n *testNode) stagingPath(vol string) string { return filepath.Join(n.dir, vol, "globalmount") }
func (n *testNode) targetPath(vol, pod string) string {
	return filepath.Join(n.dir, "pods", pod, "volumes", vol, "mount")
}

func (n *testNode) stage(t testing.TB, volID string, vc map[string]string, mode csi.VolumeCapability_AccessMode_Mode) error {
	t.Helper()
	_, err := n.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{
		VolumeId: volID, StagingTargetPath: n.stagingPath(volID), VolumeContext: vc,
		VolumeCapability: mountCapability(mode), Secrets: n.env.Secrets(),
	})
	return err
}

func (n *testNode) publish(t testing.TB, volID, pod string, mode csi.VolumeCapability_AccessMode_Mode, readOnly bool, secrets map[string]string) error {
	t.Helper()
	_, err := n.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: volID, StagingTargetPath: n.stagingPath(volID), TargetPath: n.targetPath(volID, pod),
		VolumeCapability: mountCapability(mode), Readonly: readOnly, Secrets: secrets,
	})
	return err
}

func (n *testNode) unpublish(t testing.TB, volID, pod string) {
	t.Helper()
	if _, err := n.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: volID, TargetPath: n.targetPath(volID, pod)}); err != nil {
		t.Fatalf("%s: NodeUnpublishVolume: %v", n.name, err)
	}
}

func (n *testNode) unstage(t testing.TB, volID string) {
	t.Helper()
	if _, err := n.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: volID, StagingTargetPath: n.stagingPath(volID)}); err != nil {
		t.Fatalf("%s: NodeUnstageVolume: %v", n.name, err)
	}
}

// daemon is the pid of the ceph-fuse daemon of a staged volume.
func (n *testNode) daemon(t testing.TB, volID string) int {
	t.Helper()
	pids, err := mount.FuseDaemons("/proc", mount.FuseSocket(n.workDir(volID)))
	if err != nil || len(pids) != 1 {
		t.Fatalf("%s: ceph-fuse daemons of %s: %v, %v", n.name, volID, pids, err)
	}
	return pids[0]
}

// killDaemon SIGKILLs the volume's ceph-fuse daemon, waits until it is gone and has the MDS
// evict its session. Without the eviction, files the dead client held capabilities on stay
// blocked for every client until the MDS times the session out (session_timeout, 60 s):
// CephFS behaviour a remount cannot change (evicting needs MDS admin capabilities a node's
// credentials do not have), and not what these tests are about.
func (n *testNode) killDaemon(t testing.TB, volID string) {
	t.Helper()
	pid := n.daemon(t, volID)
	var st struct{ ID int64 }
	if err := json.Unmarshal(adminCommand(t, mount.FuseSocket(n.workDir(volID)), "status"), &st); err != nil || st.ID == 0 {
		t.Fatalf("client id of ceph-fuse %d: %v", pid, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pids, _ := mount.FuseDaemons("/proc", mount.FuseSocket(n.workDir(volID))); len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ceph-fuse %d survived SIGKILL", pid)
		}
	}
	evictClient(t, n.env, st.ID)
}

// evictClient has rank 0 of the test filesystem evict a client session. It sends the MDS
// command through libcephfs rather than `ceph tell`: the ceph tool validates arguments against
// the daemon's command descriptions, and Pacific's cannot parse a Tentacle MDS's ("CephString
// got an unexpected keyword argument 'positional'"), so the Pacific-client runs against a
// Tentacle cluster failed every test that evicts.
func evictClient(t testing.TB, env cephtest.Cluster, id int64) {
	t.Helper()
	m, err := cephfs.CreateMountWithId(env.Admin.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	for _, o := range [][2]string{{"mon_host", env.Monitors}, {"key", env.Admin.Key()}, {"keyring", ""},
		{"client_mount_timeout", "30"}, {"log_to_stderr", "false"}, {"client_fs", env.FSName}} {
		if err := m.SetConfigOption(o[0], o[1]); err != nil {
			t.Fatalf("%s: %v", o[0], err)
		}
	}
	if err := m.Mount(); err != nil {
		t.Fatalf("mount %s as the admin to evict client %d: %v", env.FSName, id, err)
	}
	defer func() { _ = m.Unmount() }()
	cmd, _ := json.Marshal(map[string]any{"prefix": "client evict", "filters": []string{"id=" + strconv.FormatInt(id, 10)}})
	if _, info, err := m.MdsCommand(env.FSName+":0", [][]byte{cmd}); err != nil {
		t.Fatalf("evict client %d: %v: %s", id, err, info)
	}
}

// adminCommand asks a Ceph daemon's admin socket: the command as JSON and a NUL, answered by a
// big-endian length and that much JSON. (The ceph tool's --admin-daemon refuses the CEPH_ARGS
// the test environment sets.)
func adminCommand(t testing.TB, socket, prefix string) []byte {
	t.Helper()
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(`{"prefix":"` + prefix + `"}` + "\x00")); err != nil {
		t.Fatal(err)
	}
	var n uint32
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// cephCLI runs the ceph command line tool with the environment scripts/ceph-local.sh gives.
func cephCLI(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ceph", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ceph %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// testGroup creates a subvolume group unique to this test run, removed at the end.
func testGroup(t testing.TB, env cephtest.Cluster) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	g := "node-test-" + hex.EncodeToString(b)
	cephCLI(t, "fs", "subvolumegroup", "create", env.FSName, g)
	t.Cleanup(func() {
		// subvolumes and snapshots go first (their cleanups ran already: LIFO)
		out, err := exec.Command("ceph", "fs", "subvolumegroup", "rm", env.FSName, g, "--force").CombinedOutput()
		if err != nil {
			t.Errorf("removing subvolume group %s: %v: %s", g, err, out)
		}
	})
	return g
}

// subvolume creates a subvolume with a quota and returns its root path; it is removed at the
// end of the test with its snapshots.
func subvolume(t testing.TB, env cephtest.Cluster, group, name string, size int64) string {
	t.Helper()
	cephCLI(t, "fs", "subvolume", "create", env.FSName, name, "--group_name", group, "--size", strconv.FormatInt(size, 10))
	t.Cleanup(func() {
		out, _ := exec.Command("ceph", "fs", "subvolume", "snapshot", "ls", env.FSName, name, "--group_name", group, "--format", "json").Output()
		var snaps []struct{ Name string }
		_ = json.Unmarshal(out, &snaps) // a subvolume already gone has none
		for _, snap := range snaps {
			if out, err := exec.Command("ceph", "fs", "subvolume", "snapshot", "rm", env.FSName, name, snap.Name, "--group_name", group, "--force").CombinedOutput(); err != nil {
				t.Errorf("removing snapshot %s: %v: %s", snap.Name, err, out)
			}
		}
		if out, err := exec.Command("ceph", "fs", "subvolume", "rm", env.FSName, name, "--group_name", group, "--force").CombinedOutput(); err != nil {
			t.Errorf("removing subvolume %s: %v: %s", name, err, out)
		}
	})
	return cephCLI(t, "fs", "subvolume", "getpath", env.FSName, name, "--group_name", group)
}

func volumeContext(env cephtest.Cluster, rootPath string, mod func(*volumecontext.Volume)) map[string]string {
	v := volumecontext.Volume{ClusterID: env.ID, FSName: env.FSName, RootPath: rootPath, Mounter: volumecontext.MounterFuse}
	if mod != nil {
		mod(&v)
	}
	return v.Map()
}
