package cephtest

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// holdScript opens an RBD image read-write (registering a watch) as the client its stdin
// names, optionally writes to it (taking the exclusive lock), says "ready" and keeps it open
// until stdin closes. Debian's python3 has the rados and rbd bindings; the key travels on
// stdin, never on a command line.
const holdScript = `
import json, sys, rados, rbd
a = json.loads(sys.stdin.readline())
c = rados.Rados(rados_id=a["id"], conf={"mon_host": a["mon_host"], "key": a["key"], "rados_osd_op_timeout": "20", "rados_mon_op_timeout": "20"})
c.connect(timeout=20)
io = c.open_ioctx(a["pool"])
io.set_namespace(a["ns"])
img = rbd.Image(io, a["image"])
if a["write"]:
    img.write(b"held", 0)
print("ready", flush=True)
sys.stdin.read()
`

// HoldImage keeps pool/ns/image open from a child process whose Ceph clients connect from
// addr (see BindSrcEnv); with write it also takes the exclusive lock. The returned function
// closes it (also at the end of the test).
func (c Cluster) HoldImage(t testing.TB, addr, pool, ns, image string, write bool) (release func()) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", holdScript)
	cmd.Env = append(BindSrcEnv(t, addr), "PATH=/usr/bin:/bin")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]any{"id": c.Admin.ID, "key": c.Admin.Key(), "mon_host": c.Monitors,
		"pool": pool, "ns": ns, "image": image, "write": write})
	if _, err := stdin.Write(append(args, '\n')); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		stdin.Close()
		timer := time.AfterFunc(30*time.Second, func() { _ = cmd.Process.Kill() })
		_ = cmd.Wait()
		timer.Stop()
	}
	t.Cleanup(release)
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			release()
			t.Fatalf("holding image %s from %s: %s%s", image, addr, line, stderr.String())
		}
	case <-time.After(60 * time.Second):
		release()
		t.Fatalf("holding image %s from %s: no answer in 60 s; %s", image, addr, stderr.String())
	}
	return release
}
