package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// driver is a monoceph controller process (the binary make builds), so that the suite can
// SIGKILL it as an OOM kill or a node failure would.
type driver struct {
	t      *testing.T
	typ    string
	dir    string
	args   []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	client csi.ControllerClient
	kills  int
}

func binary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MONOCEPH_BIN")
	if bin == "" {
		bin = "../../bin/monoceph"
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the driver binary (make build): %v", err)
	}
	return bin
}

func startDriver(t *testing.T, typ, clusterMap string) *driver {
	t.Helper()
	dir, err := os.MkdirTemp("", "mf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "csi.sock")
	d := &driver{t: t, typ: typ, dir: dir, args: []string{
		"--type=" + typ, "--mode=controller", "--endpoint=unix://" + sock, "--cluster-config=" + clusterMap,
		"--ceph-connect-timeout=5s", "--ceph-op-timeout=10s", "--shutdown-grace=2s", "-v=4",
	}}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	d.conn, d.client = conn, csi.NewControllerClient(conn)
	d.launch()
	t.Cleanup(func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		conn.Close()
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	return d
}

// launch starts the process and waits for its socket.
func (d *driver) launch() {
	d.t.Helper()
	log, err := os.OpenFile(filepath.Join(d.dir, "driver.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(binary(d.t), d.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.cmd = cmd
	sock := filepath.Join(d.dir, "csi.sock")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the %s driver did not open %s; its log: %s", d.typ, sock, filepath.Join(d.dir, "driver.log"))
		}
	}
}

// kill SIGKILLs the driver and starts it again, as a Deployment's restart would.
func (d *driver) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.cmd.Wait()
	d.kills++
	d.launch()
}

func (d *driver) String() string { return fmt.Sprintf("%s driver (pid %d)", d.typ, d.cmd.Process.Pid) }

// ctx is a context for one RPC with the CO's deadline.
func rpcCtx(deadline time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), deadline)
}
