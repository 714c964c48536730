package driver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// csiAddonsCLI is the real csi-addons client (cmd/csi-addons of kubernetes-csi-addons,
// built from scripts/tools/csi-addons by `make bin/csi-addons`), found through
// MONOCEPH_CSI_ADDONS_BIN, which `make test` sets.
func csiAddonsCLI(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MONOCEPH_CSI_ADDONS_BIN")
	if bin == "" {
		if cephtest.Required() {
			t.Fatal("MONOCEPH_INTEGRATION=1 but MONOCEPH_CSI_ADDONS_BIN is unset: run make test, or make bin/csi-addons and point it there")
		}
		t.Skip("MONOCEPH_CSI_ADDONS_BIN unset: `make bin/csi-addons` builds the csi-addons CLI")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("MONOCEPH_CSI_ADDONS_BIN: %v", err)
	}
	return bin
}

func testConfig(t *testing.T, mode Mode) Config {
	dir := t.TempDir()
	cmap := filepath.Join(dir, "clusters.json")
	if err := os.WriteFile(cmap, []byte(`[{"clusterID":"local","monitors":["127.0.0.1:6789"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	return Config{
		Type: TypeRBD, Mode: mode, NodeID: "node-1", ClusterConfig: cmap, StateDir: filepath.Join(dir, "state"),
		Endpoint:          "unix://" + filepath.Join(dir, "csi.sock"),
		CSIAddonsEndpoint: "unix://" + filepath.Join(dir, "csi-addons.sock"),
		CephTimeouts:      ceph.DefaultTimeouts, ConnIdleTTL: time.Minute, HealthTimeout: time.Second, ShutdownGrace: time.Second,
	}
}

// TestCSIAddonsCLI runs the driver with a csi-addons socket and has the csi-addons project's
// own client call Identity on it.
func TestCSIAddonsCLI(t *testing.T) {
	bin := csiAddonsCLI(t)
	for _, tt := range []struct {
		mode Mode
		caps []string
	}{
		{ModeController, []string{"CONTROLLER_SERVICE", "NETWORK_FENCE", "OFFLINE", "VOLUME_REPLICATION"}},
		{ModeNode, []string{"NODE_SERVICE", "ONLINE", "ENCRYPTIONKEYROTATION"}},
		{ModeAll, []string{"CONTROLLER_SERVICE", "NETWORK_FENCE", "GET_CLIENTS_TO_FENCE", "OFFLINE", "VOLUME_REPLICATION", "NODE_SERVICE", "ONLINE", "ENCRYPTIONKEYROTATION"}},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			d, err := New(testConfig(t, tt.mode))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
				if _, err := os.Stat(d.CSIAddonsSocketPath()); !os.IsNotExist(err) {
					t.Errorf("csi-addons socket left behind: %v", err)
				}
			}()
			cli := func(op string) string {
				t.Helper()
				out, err := exec.Command(bin, "-endpoint", "unix://"+d.CSIAddonsSocketPath(), "-operation", op).CombinedOutput()
				if err != nil {
					t.Fatalf("csi-addons -operation %s: %v\n%s", op, err, out)
				}
				return string(out)
			}
			// Probe says ready once Run has started serving
			ready := regexp.MustCompile(`ready:\s*\{\s*value:\s*true\s*\}`)
			deadline := time.Now().Add(10 * time.Second)
			for out := cli("Probe"); !ready.MatchString(out); out = cli("Probe") {
				if time.Now().After(deadline) {
					t.Fatalf("Probe never ready: %s", out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if out := cli("GetIdentity"); !regexp.MustCompile(`name:\s*"rbd\.monoceph\.io"`).MatchString(out) || !strings.Contains(out, "vendor_version") {
				t.Errorf("GetIdentity: %s", out)
			}
			out := cli("GetCapabilities")
			for _, c := range tt.caps {
				if !regexp.MustCompile(`type:\s*` + c + `\b`).MatchString(out) {
					t.Errorf("GetCapabilities lacks %s: %s", c, out)
				}
			}
			if tt.mode == ModeController && regexp.MustCompile(`GET_CLIENTS_TO_FENCE|NODE_SERVICE|\bONLINE|ENCRYPTIONKEYROTATION`).MatchString(out) {
				t.Errorf("a controller-only process claims a node's capability: %s", out)
			}
			if tt.mode == ModeNode && regexp.MustCompile(`CONTROLLER_SERVICE|NETWORK_FENCE|OFFLINE|VOLUME_REPLICATION`).MatchString(out) {
				t.Errorf("a node-only process claims a controller's capability: %s", out)
			}
		})
	}
}

func TestCSIAddonsMisconfiguration(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"CephFS node mode", func(c *Config) { c.Type, c.Mode = TypeCephFS, ModeNode }, "a CephFS node serves no csi-addons service"},
		{"same socket as CSI", func(c *Config) { c.CSIAddonsEndpoint = c.Endpoint }, "is the CSI socket too"},
		{"tcp", func(c *Config) { c.CSIAddonsEndpoint = "tcp://127.0.0.1:9000" }, "--csi-addons-endpoint"},
		{"negative expiry", func(c *Config) { c.FenceExpiry = -time.Hour }, "must be positive"},
		{"fallback too wide", func(c *Config) { c.FenceFallbackMaxPrefixV4 = 8 }, "/16 to /32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t, ModeController)
			tt.edit(&cfg)
			if err := cfg.Complete(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Complete: %v; want an error containing %q", err, tt.want)
			}
		})
	}
	// off by default, in every mode
	cfg := testConfig(t, ModeNode)
	cfg.CSIAddonsEndpoint = ""
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
}
