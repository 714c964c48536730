// Package cephcsitest runs ceph-csi's own binary (the reference build in
// ../shared/reference/ceph-csi/) against the local test cluster, so takeover tests start from
// volumes, snapshots and journals ceph-csi itself made.
//
// ceph-csi reads fixed paths (/etc/ceph-csi-config/config.json, /etc/ceph/ceph.conf) and writes
// key files to /tmp/csi/keys. Each NS is a private mount namespace in which /etc is an overlay
// whose changes land in the test's temporary directory and /tmp/csi is a tmpfs: nothing of
// ceph-csi's reaches the host's /etc, and its key files stay in memory private to it. The only
// host change is the empty mount point /tmp/csi.
package cephcsitest

import (
	"bufio"
	"compress/gzip"
	"context"
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

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/clustermap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Version is the build the tests expect: ceph-csi at commit 52fcb7b0 (between v3.12.2 and
// v3.13.0), whose formats internal/cephcsi reads.
const Version = "v3.12-devel-52fcb7b0"

// Driver names ceph-csi registers under.
const (
	RBDDriverName    = "rbd.csi.ceph.com"
	CephFSDriverName = "cephfs.csi.ceph.com"
)

// ClusterID is the cluster ID the tests give ceph-csi: not the local cluster's ID "local", so
// that a handle's cluster ID is read from the handle, not assumed.
const ClusterID = "c1"

// binaryPath finds the gzipped reference binary: $MONOCEPH_CEPHCSI_BINARY, else the shared
// reference directory next to the repository.
func binaryPath() (string, error) {
	if p := os.Getenv("MONOCEPH_CEPHCSI_BINARY"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	// the reference directory sits next to the checkout (../shared), or next to a directory
	// holding worktrees
	for d := dir; d != "/"; d = filepath.Dir(d) {
		matches, _ := filepath.Glob(filepath.Join(d, "shared", "reference", "ceph-csi", "cephcsi-*.gz"))
		if len(matches) == 1 {
			return matches[0], nil
		}
	}
	return "", fmt.Errorf("the ceph-csi reference binary was not found: set MONOCEPH_CEPHCSI_BINARY (../shared/reference/ceph-csi/cephcsi-%s.gz)", Version)
}

var (
	extractOnce sync.Once
	extracted   string
	extractErr  error
)

// Binary returns the path of the unpacked ceph-csi binary. It is unpacked once per machine,
// to a path in the temporary directory named after the archive's size and modification time,
// and shared by every test process after that: one per process (85 MB each) piled up in /tmp,
// since no process can know it is the last to need it.
func Binary(t testing.TB) string {
	t.Helper()
	extractOnce.Do(func() {
		var src string
		if src, extractErr = binaryPath(); extractErr != nil {
			return
		}
		if !strings.HasSuffix(src, ".gz") {
			extracted = src
			return
		}
		var fi os.FileInfo
		if fi, extractErr = os.Stat(src); extractErr != nil {
			return
		}
		dst := filepath.Join(os.TempDir(), fmt.Sprintf("monoceph-cephcsi-%s-%d-%d", Version, fi.Size(), fi.ModTime().Unix()))
		if _, err := os.Stat(dst); err != nil {
			extractErr = gunzip(src, dst)
		}
		extracted = dst
	})
	if extractErr != nil {
		if cephtest.Required() {
			t.Fatal(extractErr)
		}
		t.Skip(extractErr)
	}
	return extracted
}

func gunzip(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return err
	}
	// a file of this process's own, renamed into place whole: test processes of several
	// packages may unpack at the same time, and none may run a half-written binary
	out, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".part*")
	if err != nil {
		return err
	}
	defer os.Remove(out.Name())
	if _, err := io.Copy(out, zr); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(0o755); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(out.Name(), dst)
}

// NS is a private mount namespace holding ceph-csi's configuration, kept alive by a holder
// process so that processes can be started in it (and its mounts inspected) after others
// ended.
type NS struct {
	Dir    string // the test's directory: sockets, staging and target paths live here
	holder *exec.Cmd
	mntNS  string // the namespace's identity, readlink /proc/<pid>/ns/mnt
}

// NewNS makes the namespace with a config.json naming the local cluster as ClusterID, plus
// extra fields of the cluster entry (e.g. `"cephFS":{"subvolumeGroup":"g"}`).
func NewNS(t testing.TB, cl cephtest.Cluster, extra string) *NS {
	t.Helper()
	return NewNSFor(t, ConfigJSON(cl, extra))
}

// ConfigJSON is ceph-csi's config.json naming the local cluster as ClusterID, with extra fields
// of the entry.
func ConfigJSON(cl cephtest.Cluster, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q]%s}]`, ClusterID, cl.Monitors, extra)
}

// ClusterMap writes ConfigJSON(cl, extra) as monoceph's cluster map (monoceph reads ceph-csi's
// config.json as it is) into dir, or a temporary directory when dir is "", and loads it.
func ClusterMap(t testing.TB, cl cephtest.Cluster, extra, dir string) (string, *clustermap.Store) {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, "clusters.json")
	if err := os.WriteFile(p, []byte(ConfigJSON(cl, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := clustermap.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, store
}

// NewNSFor makes the namespace with the given config.json.
func NewNSFor(t testing.TB, config string) *NS {
	t.Helper()
	// short: ceph-fuse admin socket paths must fit in 107 bytes
	dir, err := os.MkdirTemp("", "cc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"etc-up", "etc-work", "log", "asok"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	conf := fmt.Sprintf("[global]\nauth_cluster_required = cephx\nauth_service_required = cephx\nauth_client_required = cephx\nms bind ipv6 = false\n"+
		"[client]\nadmin socket = %s/asok/$name.$pid.asok\npid file = \nlog file = %s/log/$name.$pid.log\n", dir, dir)
	// the mount point of the key directory; empty on the host
	if err := os.MkdirAll("/tmp/csi", 0o755); err != nil {
		t.Fatal(err)
	}
	// First let go of the copies of other tests' mounts the namespace starts with: it lives
	// as long as the test, and they would keep those tests' loop devices open.
	script := cephtest.DropOtherMounts + fmt.Sprintf(`
set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir=%[1]s/etc-up,workdir=%[1]s/etc-work /etc
mkdir -p /etc/ceph-csi-config /etc/ceph
cat > /etc/ceph-csi-config/config.json <<'EOF'
%[2]s
EOF
cat > /etc/ceph/ceph.conf <<'EOF'
%[3]s
EOF
: > /etc/ceph/keyring
mount -t tmpfs -o mode=0700 tmpfs /tmp/csi
mkdir /tmp/csi/keys
echo ready
exec sleep 1000000
`, dir, config, conf)
	holder := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dir)
	holder.Stderr = os.Stderr
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		_ = holder.Process.Kill()
		_ = holder.Wait()
		t.Fatalf("setting up ceph-csi's mount namespace: %q, %v", line, err)
	}
	n := &NS{Dir: dir, holder: holder}
	if n.mntNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	return n
}

// Command runs name in the namespace.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(n.holder.Process.Pid), "-m", "--", name}, args...)...)
}

// Processes lists the processes in the namespace other than its holder, e.g. ceph-fuse daemons
// ceph-csi started (they are reparented away from it, but stay in its namespace).
func (n *NS) Processes() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == n.holder.Process.Pid {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == n.mntNS {
			out = append(out, pid)
		}
	}
	return out
}

// KillAll kills every process started in the namespace (all of them by the test), as a node
// plugin's container going away kills its FUSE daemons.
func (n *NS) KillAll() {
	for _, pid := range n.Processes() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(n.Processes()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// Mounts lists the mount points in the namespace below prefix.
func (n *NS) Mounts(prefix string) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", n.holder.Process.Pid))
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			out = append(out, f[4])
		}
	}
	return out
}

func (n *NS) close() {
	n.KillAll()
	_ = n.holder.Process.Kill()
	_ = n.holder.Wait()
}

// Driver is one running ceph-csi process.
type Driver struct {
	Name   string
	Socket string
	Conn   *grpc.ClientConn
	cmd    *exec.Cmd
	log    string
}

// Options choose what a ceph-csi process serves.
type Options struct {
	Type       string // "rbd" or "cephfs"
	Controller bool
	Node       bool
	NodeID     string
}

// Start runs ceph-csi in the namespace and waits for its socket.
func (n *NS) Start(t testing.TB, o Options) *Driver {
	t.Helper()
	name := RBDDriverName
	if o.Type == "cephfs" {
		name = CephFSDriverName
	}
	if o.NodeID == "" {
		o.NodeID = "cephcsi-node"
	}
	sock := filepath.Join(n.Dir, o.Type+".sock")
	_ = os.Remove(sock) // ceph-csi leaves its socket behind
	log := filepath.Join(n.Dir, "log", o.Type+"-cephcsi.log")
	lf, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := n.Command(Binary(t), "--type="+o.Type, fmt.Sprintf("--controllerserver=%t", o.Controller), fmt.Sprintf("--nodeserver=%t", o.Node),
		"--endpoint=unix://"+sock, "--csi-addons-endpoint=unix://"+filepath.Join(n.Dir, o.Type+"-addons.sock"),
		"--nodeid="+o.NodeID, "--drivername="+name, "--pidlimit=-1", "--setmetadata=true", "--clustername=k8s-"+ClusterID, "--v=5")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &Driver{Name: name, Socket: sock, cmd: cmd, log: log}
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(log); err == nil {
				t.Logf("ceph-csi %s log (tail):\n%s", o.Type, tail(string(b), 60))
			}
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			b, _ := os.ReadFile(log)
			t.Fatalf("ceph-csi %s did not create its socket:\n%s", o.Type, tail(string(b), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d.Conn, err = grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	return d
}

// Stop ends the process (SIGTERM, then SIGKILL) and closes the connection; idempotent.
func (d *Driver) Stop() {
	if d.Conn != nil {
		d.Conn.Close()
		d.Conn = nil
	}
	if d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
	d.cmd = nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Secrets are what ceph-csi's Secrets hold for the local cluster's admin: userID/userKey (RBD,
// and CephFS static volumes) and adminID/adminKey (CephFS provisioning and node staging).
func Secrets(cl cephtest.Cluster) map[string]string {
	return map[string]string{"userID": cl.Admin.ID, "userKey": cl.Admin.Key(), "adminID": cl.Admin.ID, "adminKey": cl.Admin.Key()}
}

// Wait retries f (a ceph-csi CreateVolume answering ABORTED while a CephFS clone copies) until
// it succeeds or the deadline passes.
func Wait[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "Aborted") {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(time.Second):
		}
	}
}

// RBDNamespace makes an RBD namespace of its own for a test in the local cluster's pool and
// removes it afterwards with everything left in it (images and their snapshots, the trash,
// journal objects), so a failed test leaves nothing behind.
func RBDNamespace(t testing.TB, cl cephtest.Cluster, conn *ceph.Conn) (string, *rados.IOContext) {
	t.Helper()
	root, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("cc%d", time.Now().UnixNano()%1e12)
	if err := rbd.NamespaceCreate(root, ns); err != nil {
		t.Fatal(err)
	}
	io, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	io.SetNamespace(ns)
	t.Cleanup(func() {
		defer root.Destroy()
		defer io.Destroy()
		names, _ := rbd.GetImageNames(io)
		for _, n := range names {
			if img, err := rbd.OpenImage(io, n, rbd.NoSnapshot); err == nil {
				snaps, _ := img.GetSnapshotNames()
				for _, s := range snaps {
					_ = img.GetSnapshot(s.Name).Remove()
				}
				img.Close()
			}
		}
		for range 3 { // clones first, then their parents
			names, _ = rbd.GetImageNames(io)
			for _, n := range names {
				_ = rbd.RemoveImage(io, n)
			}
			trash, _ := rbd.GetTrashList(io)
			for _, tr := range trash {
				_ = rbd.TrashRemove(io, tr.Id, true)
			}
		}
		_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
		_ = rbd.NamespaceRemove(root, ns)
	})
	return ns, io
}
