package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/kubetest"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func writeMap(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "clusters.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMisconfigurationFailsFast(t *testing.T) {
	good := writeMap(t, `[{"clusterID":"a","monitors":["127.0.0.1:6789"]}]`)
	bad := writeMap(t, `[{"clusterID":"a"}]`)
	sock := "unix://" + filepath.Join(t.TempDir(), "csi.sock")
	base := []string{"--endpoint", sock, "--nodeid", "n1", "--cluster-config", good}
	kubeconfig := writeMap(t, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: x}}]\ncurrent-context: c\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no type", base, "--type is required"},
		{"bad type", append([]string{"--type=nfs"}, base...), `--type="nfs"`},
		{"bad mode", append([]string{"--type=rbd", "--mode=both"}, base...), `--mode="both"`},
		{"no endpoint", []string{"--type=rbd", "--endpoint=", "--nodeid=n1", "--cluster-config", good}, "endpoint is empty"},
		{"tcp endpoint", []string{"--type=rbd", "--endpoint=tcp://127.0.0.1:1", "--nodeid=n1", "--cluster-config", good}, "only unix://"},
		{"node without nodeid", []string{"--type=rbd", "--mode=node", "--endpoint", sock, "--cluster-config", good}, "--nodeid is required"},
		{"missing map", []string{"--type=rbd", "--endpoint", sock, "--nodeid=n1", "--cluster-config", "/nonexistent/x.json"}, "no such file"},
		{"invalid map", []string{"--type=rbd", "--endpoint", sock, "--nodeid=n1", "--cluster-config", bad}, "monitors: at least one"},
		{"bad driver name", append([]string{"--type=rbd", "--drivername=-x"}, base...), "--drivername"},
		{"bad metrics address", append([]string{"--type=rbd", "--metrics-address=nonsense"}, base...), "--metrics-address"},
		{"zero timeout", append([]string{"--type=rbd", "--ceph-op-timeout=0s"}, base...), "--ceph-op-timeout"},
		{"negative node command timeout", append([]string{"--type=rbd", "--node-command-timeout=-1s"}, base...), "--node-command-timeout"},
		{"negative clone wait", append([]string{"--type=cephfs", "--cephfs-clone-wait=-1s"}, base...), "--cephfs-clone-wait"},
		{"bad block type", append([]string{"--type=rbd", "--snapshot-metadata-block-type=exact"}, base...), "--snapshot-metadata-block-type"},
		{"negative stream cap", append([]string{"--type=rbd", "--snapshot-metadata-max-streams-per-user=-1"}, base...), "--snapshot-metadata-max-streams-per-user"},
		{"negative connection age", append([]string{"--type=rbd", "--snapshot-metadata-max-connection-age=-1s"}, base...), "--snapshot-metadata-max-connection-age"},
		{"snapshot metadata without TLS", append([]string{"--type=rbd", "--snapshot-metadata-address=127.0.0.1:0", "--snapshot-metadata-audience=a"}, base...), "--snapshot-metadata-tls-cert"},
		{"snapshot metadata without audience", append([]string{"--type=rbd", "--snapshot-metadata-address=127.0.0.1:0", "--snapshot-metadata-tls-cert=c", "--snapshot-metadata-tls-key=k"}, base...), "--snapshot-metadata-audience"},
		{"snapshot metadata on a node", append([]string{"--type=rbd", "--mode=node", "--snapshot-metadata-address=127.0.0.1:0"}, base...), "RBD controllers"},
		{"snapshot metadata unreadable key pair", append([]string{"--type=rbd", "--mode=controller", "--snapshot-metadata-address=127.0.0.1:0", "--snapshot-metadata-tls-cert=/nonexistent/c", "--snapshot-metadata-tls-key=/nonexistent/k", "--snapshot-metadata-audience=a", "--kubeconfig=" + kubeconfig}, base...), "TLS key pair"},
		{"changed-blocks without argument", []string{"changed-blocks"}, "want one NAMESPACE/SNAPSHOT"},
		{"changed-blocks bad argument", []string{"changed-blocks", "just-a-name"}, "is not NAMESPACE/SNAPSHOT"},
		{"stray argument", append([]string{"--type=rbd", "extra"}, base...), `unexpected argument "extra"`},
		{"unknown flag", append([]string{"--type=rbd", "--frobnicate"}, base...), "frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code == 0 {
				t.Fatalf("exit code 0 for %v", tt.args)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("stderr %q lacks %q", stderr.String(), tt.want)
			}
		})
	}
}

// TestNodeCommandTimeout: filesystem commands have their own bound, at least two minutes by
// default, not --ceph-op-timeout's 30 seconds.
func TestNodeCommandTimeout(t *testing.T) {
	tests := []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--type=rbd"}, 2 * time.Minute},
		{[]string{"--type=rbd", "--node-command-timeout=10m", "--ceph-op-timeout=5s"}, 10 * time.Minute},
	}
	for _, tt := range tests {
		cfg, _, err := parseFlags(tt.args, io.Discard)
		if err != nil || cfg.NodeCommandTimeout != tt.want {
			t.Errorf("parseFlags(%q): --node-command-timeout %v, %v; want %v", tt.args, cfg.NodeCommandTimeout, err, tt.want)
		}
	}
}

func TestVersion(t *testing.T) {
	var stdout bytes.Buffer
	if code := run([]string{"--version"}, &stdout, io.Discard); code != 0 || !strings.HasPrefix(stdout.String(), "monoceph ") {
		t.Fatalf("--version: %d %q", code, stdout.String())
	}
}

// TestServeHealthAndSIGTERM runs the binary's main path against the local Ceph cluster: Identity
// over the socket, /healthz, then a real SIGTERM.
func TestServeHealthAndSIGTERM(t *testing.T) {
	cl := cephtest.Env(t)
	tests := []struct {
		name      string
		clusters  string
		wantCode  int
		wantInMsg string
	}{
		{"local cluster", fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q]}]`, cl.ID, cl.Monitors), 200, "1 clusters reachable"},
		{"dead monitor", fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q]},{"clusterID":"dead-cluster","monitors":["127.0.0.1:1"]}]`, cl.ID, cl.Monitors),
			503, "unreachable clusters: dead-cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "csi.sock")
			addr := freeAddr(t)
			args := []string{"--type=rbd", "--mode=all", "--endpoint=unix://" + sock, "--nodeid=n1",
				"--cluster-config", writeMap(t, tt.clusters), "--metrics-address=" + addr, "--health-timeout=2s", "--state-dir=" + t.TempDir()}
			var stderr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(args, io.Discard, &stderr) }()

			conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			id := csi.NewIdentityClient(conn)
			deadline := time.Now().Add(10 * time.Second)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				p, err := id.Probe(ctx, &csi.ProbeRequest{})
				cancel()
				if err == nil && p.GetReady().GetValue() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Probe never ready: %v %v; stderr %s", p, err, stderr.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			info, err := id.GetPluginInfo(context.Background(), &csi.GetPluginInfoRequest{})
			if err != nil || info.GetName() != "rbd.monoceph.io" || info.GetVendorVersion() == "" {
				t.Fatalf("GetPluginInfo = %v, %v", info, err)
			}
			if _, err := id.GetPluginCapabilities(context.Background(), &csi.GetPluginCapabilitiesRequest{}); err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantCode || !strings.Contains(string(body), tt.wantInMsg) {
				t.Fatalf("/healthz = %d %q, want %d containing %q", resp.StatusCode, body, tt.wantCode, tt.wantInMsg)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Fatalf("/healthz took %v, health timeout is 2s", el)
			}
			resp, err = http.Get("http://" + addr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metrics, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, m := range []string{`monoceph_grpc_requests_total{code="OK",method="Probe",service="csi.v1.Identity"}`, "monoceph_ceph_cluster_reachable"} {
				if !strings.Contains(string(metrics), m) {
					t.Errorf("/metrics lacks %s", m)
				}
			}

			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != 0 {
					t.Fatalf("exit code %d after SIGTERM; stderr %s", code, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no exit 10s after SIGTERM")
			}
			if _, err := os.Stat(sock); !os.IsNotExist(err) {
				t.Fatalf("socket left behind after SIGTERM: %v", err)
			}
		})
	}
}

// freeAddr is a loopback address for a listener the test starts later (kubetest.FreePort says
// why not port 0's pick).
func freeAddr(t *testing.T) string {
	return fmt.Sprintf("127.0.0.1:%d", kubetest.FreePort(t))
}

// TestReplaceImmutableNeedsRelease: the upgrade hook deletes objects by name, so it must be told
// whose objects it may delete (issue 26, item 7).
func TestReplaceImmutableNeedsRelease(t *testing.T) {
	obj := `--object={"apiVersion":"storage.k8s.io/v1","kind":"CSIDriver","metadata":{"name":"rbd.monoceph.io"}}`
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{obj}, "--release"},
		{[]string{obj, "--release=monoceph"}, "<namespace>/<name>"},
		{[]string{obj, "--release=/monoceph"}, "<namespace>/<name>"},
	} {
		var out, errOut bytes.Buffer
		if code := replaceImmutable(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want 2 and a message naming %s", c.args, code, errOut.String(), c.want)
		}
	}
}
