package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cluster is the suite's own Ceph cluster, made by scripts/ceph-local.sh in a directory and on
// ports of its own: the faults stop and freeze its daemons, which must not disturb the cluster
// the other tests share. BlueStore, so that a SIGKILLed OSD comes back with its data.
type cluster struct {
	dir  string
	env  map[string]string // what `ceph-local.sh start` printed
	base []string          // the script's own settings: directory, ports, object store
}

const (
	monV2Port = 20300
	monV1Port = 20789
)

func script(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../scripts/ceph-local.sh")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startCluster makes the suite's cluster anew (a previous run's failure may have left things in
// it) and deletes it when the test ends, unless MONOCEPH_FAULTS_KEEP=1 keeps it for a look.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	dir := os.Getenv("MONOCEPH_FAULTS_CEPH_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "monoceph-ceph-faults")
	}
	c := &cluster{dir: dir, base: []string{
		"CEPH_DIR=" + dir, "CEPH_OBJECTSTORE=bluestore", "CEPH_BLUESTORE_BYTES=" + strconv.Itoa(4<<30),
		fmt.Sprintf("CEPH_MON_V2_PORT=%d", monV2Port), fmt.Sprintf("CEPH_MON_V1_PORT=%d", monV1Port),
		"CEPH_BIND_PORT_MIN=20800", "CEPH_BIND_PORT_MAX=20899",
	}}
	c.run(t, nil, "start", "--fresh")
	t.Cleanup(func() {
		if os.Getenv("MONOCEPH_FAULTS_KEEP") != "1" {
			c.run(t, nil, "stop", "--purge")
		}
	})
	return c
}

// run runs ceph-local.sh with the suite's settings and extra environment; after a start it
// reads the environment the script prints. `start` restarts only the daemons that are not
// running.
func (c *cluster) run(t *testing.T, extra []string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, script(t), args...)
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, c.base...), extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("ceph-local.sh %v: %v\n%s", args, err, errb.String())
	}
	if args[0] != "start" {
		return
	}
	c.env = map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			c.env[k] = strings.Trim(v, `"`)
		}
	}
	if c.env["CEPH_MONITORS"] == "" || c.env["CEPH_ADMIN_KEY"] == "" {
		t.Fatalf("ceph-local.sh start printed no environment:\n%s", out.String())
	}
}

// restart brings back the daemons a fault stopped, the way an operator would: from a shell
// that sourced the cluster's own env file, CEPH_ARGS included (which once made the script's
// restarted OSD fail and the script bootstrap a new, empty cluster).
func (c *cluster) restart(t *testing.T) {
	t.Helper()
	fsid := c.fsid(t)
	var extra []string
	for k, v := range c.env {
		extra = append(extra, k+"="+v)
	}
	c.run(t, extra, "start")
	if got := c.fsid(t); got != fsid {
		t.Fatalf("ceph-local.sh start made a new cluster (fsid %s, was %s) instead of restarting the stopped daemons", got, fsid)
	}
}

func (c *cluster) fsid(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "ceph.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "fsid" {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no fsid in ceph.conf")
	return ""
}

// signal sends sig to daemon (mon.a, mgr.x, osd.0, mds.a).
func (c *cluster) signal(t *testing.T, daemon string, sig syscall.Signal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "run", daemon+".pid"))
	if err != nil {
		t.Fatalf("pid of %s: %v", daemon, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%d %s (%d): %v", sig, daemon, pid, err)
	}
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		for deadline := time.Now().Add(30 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (%d) did not end", daemon, pid)
			}
		}
	}
}

// ceph runs the ceph or rbd CLI against the cluster and returns its output.
func (c *cluster) cli(t *testing.T, prog string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, append([]string{"-c", c.env["CEPH_CONF"], "--keyring", c.env["CEPH_KEYRING"], "--id", "admin"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", prog, args, err)
	}
	return out
}
