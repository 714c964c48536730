package fence

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/childtest"
)

// fencedSource is the loopback address the fenced clients connect from. The cluster, and every
// other client of it, use 127.0.0.1.
const fencedSource = "127.0.0.2"

// needTool finds a program the test needs: missing, it fails the test when integration tests
// are required and skips it otherwise.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if cephtest.Required() {
			t.Fatalf("%s is needed (scripts/install-deps.sh installs it): %v", name, err)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

// buildShim compiles testdata/bindsrc.c, which makes a process's Ceph connections leave from
// $BIND_SRC.
func buildShim(t *testing.T) string {
	t.Helper()
	gcc := needTool(t, "gcc")
	src, err := filepath.Abs("testdata/bindsrc.c")
	if err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(t.TempDir(), "bindsrc.so")
	if out, err := exec.Command(gcc, "-Wall", "-shared", "-fPIC", "-o", so, src, "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("build shim: %v\n%s", err, out)
	}
	return so
}

// fromSource runs a command as a Ceph client on fencedSource.
func fromSource(cmd *exec.Cmd, shim string) *exec.Cmd {
	cmd.Env = append(os.Environ(), "BIND_SRC="+fencedSource, "LD_PRELOAD="+shim)
	return cmd
}

// radosPut writes an object with the rados CLI, a new client each time, from fencedSource.
func radosPut(t *testing.T, shim, pool, obj string) (string, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, []byte("written from "+fencedSource), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := fromSource(exec.CommandContext(ctx, needTool(t, "rados"), "-p", pool, "put", obj, file), shim).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// remoteClient is one long-lived Ceph client on fencedSource: this test binary re-executed
// under the shim, running TestFenceHelperClient.
type remoteClient struct {
	*childtest.Child
	addr string
}

func startRemoteClient(t *testing.T, shim string) *remoteClient {
	t.Helper()
	c := &remoteClient{Child: childtest.Start(t, "TestFenceHelperClient",
		"BIND_SRC="+fencedSource, "LD_PRELOAD="+shim, "MONOCEPH_FENCE_HELPER=1")}
	c.addr = c.Next(t, 90*time.Second)
	return c
}

// write asks the remote client for one write and returns its errno (0: written).
func (c *remoteClient) write(t *testing.T, obj string) int {
	t.Helper()
	c.Send(t, "write %s", obj)
	line := c.Next(t, 90*time.Second)
	n, err := strconv.Atoi(strings.TrimPrefix(line, "errno "))
	if err != nil {
		t.Fatalf("remote client said %q", line)
	}
	return n
}

// TestFenceHelperClient is the remote client's side: it connects, reports its address as the
// cluster sees it, then writes an object for every "write <name>" line and answers its errno.
func TestFenceHelperClient(t *testing.T) {
	if os.Getenv("MONOCEPH_FENCE_HELPER") != "1" {
		t.Skip("runs only as the remote client of TestFencingIsEnforced")
	}
	env := cephtest.Env(t)
	pool := ceph.NewPool(ceph.PoolOptions{Timeouts: ceph.Timeouts{Connect: 20 * time.Second, Op: 20 * time.Second}})
	defer pool.Close()
	conn, err := pool.Get(context.Background(), env.Monitors, env.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	addr, err := conn.Rados().GetAddrs()
	if err != nil {
		t.Fatal(err)
	}
	childtest.Say("%s", addr)
	ioctx, err := conn.Rados().OpenIOContext(env.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	defer ioctx.Destroy()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		obj, ok := strings.CutPrefix(sc.Text(), "write ")
		if !ok {
			continue
		}
		errno := 0
		if err := ioctx.WriteFull(obj, []byte("written from "+fencedSource)); err != nil {
			errno = -ceph.Errno(err)
			if errno == 0 {
				errno = -1
			}
		}
		childtest.Say("errno %d", errno)
	}
}

// eshutdown is what Ceph answers a blocklisted client: EBLOCKLISTED is ESHUTDOWN.
const eshutdown = 108

// TestFencingIsEnforced fences a real client: one on 127.0.0.2 writes, is fenced, and its next
// write fails with ESHUTDOWN while the test's own client on 127.0.0.1 keeps writing; after
// unfencing, a new client on 127.0.0.2 writes again. Once with the address alone and once with
// a wider range that spares 127.0.0.1.
func TestFencingIsEnforced(t *testing.T) {
	c := newOnCluster(t, Options{})
	shim := buildShim(t)
	needTool(t, "rados")
	if os.Getenv("CEPH_ARGS") == "" {
		t.Fatal("CEPH_ARGS is unset: the rados CLI needs the cluster's environment (scripts/ceph-local.sh env)")
	}
	ioctx, err := c.admin(t).Rados().OpenIOContext(c.env.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string]bool{}
	t.Cleanup(func() {
		for obj := range objects {
			_ = ioctx.Delete(obj)
		}
		ioctx.Destroy()
	})
	obj := func(name string) string {
		o := "monoceph-fence-test-" + name
		objects[o] = true
		return o
	}

	for _, cidr := range []string{"127.0.0.2/32", "127.0.0.2/31"} {
		t.Run(strings.ReplaceAll(cidr, "/", "_"), func(t *testing.T) {
			c.cleanupEntries(t, cidr)
			remote := startRemoteClient(t, shim)
			if !strings.HasPrefix(strings.TrimPrefix(remote.addr, "v2:"), fencedSource+":") {
				t.Fatalf("the remote client reaches the cluster from %s, not %s: the shim did not work", remote.addr, fencedSource)
			}
			if errno := remote.write(t, obj("remote")); errno != 0 {
				t.Fatalf("remote write before fencing: errno %d", errno)
			}
			if out, err := radosPut(t, shim, c.env.RBDPool, obj("cli")); err != nil {
				t.Fatalf("rados put from %s before fencing: %v: %s", fencedSource, err, out)
			}

			if err := c.fence(t, cidr); err != nil {
				t.Fatal(err)
			}
			fenced := time.Now()
			// the monitors committed the entry before answering; the OSD applies the new
			// osdmap a moment later, so allow it that moment and report how long it took
			errno, late := remote.write(t, obj("remote")), 0
			for ; errno == 0 && time.Since(fenced) < 10*time.Second; errno = remote.write(t, obj("remote")) {
				late++
				time.Sleep(50 * time.Millisecond)
			}
			if errno != eshutdown {
				t.Fatalf("remote write after fencing %s: errno %d, want %d (ESHUTDOWN)", cidr, errno, eshutdown)
			}
			t.Logf("fenced client refused %v after FenceClusterNetwork returned, after %d writes that got through", time.Since(fenced).Round(time.Millisecond), late)
			if out, err := radosPut(t, shim, c.env.RBDPool, obj("cli")); err == nil || !strings.Contains(out, "(108)") {
				t.Fatalf("rados put from %s while fenced: %v: %s; want (108)", fencedSource, err, out)
			}
			if err := ioctx.WriteFull(obj("own"), []byte("from 127.0.0.1")); err != nil {
				t.Fatalf("the test's own client on 127.0.0.1 was cut off too: %v", err)
			}

			if err := c.unfence(t, cidr); err != nil {
				t.Fatal(err)
			}
			unfenced := time.Now()
			var out string
			for out, err = radosPut(t, shim, c.env.RBDPool, obj("cli")); err != nil && time.Since(unfenced) < 10*time.Second; out, err = radosPut(t, shim, c.env.RBDPool, obj("cli")) {
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("rados put from %s after unfencing: %v: %s", fencedSource, err, out)
			}
		})
	}
}
