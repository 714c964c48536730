// Package vaulttest runs a real HashiCorp Vault (`vault server -dev`, built by make into
// bin/vault) for the tests of the Vault KMS providers.
//
// The binary is found through MONOCEPH_VAULT_BIN (make test-vault sets it). When it is unset the test
// is skipped, unless MONOCEPH_INTEGRATION=1, where it fails: as with internal/cephtest, a run
// that is meant to be complete must not pass by skipping.
package vaulttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/kubetest"
)

// Server is a running dev-mode Vault: in memory, unsealed, with the root token Token. It stops
// when the test ends.
type Server struct {
	Addr  string // http://127.0.0.1:<port>
	Token string // the root token (random per server)

	proc   *kubetest.Process
	client *vault.Client
}

// Start runs a dev-mode Vault on a free port and returns once it answers.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv("MONOCEPH_VAULT_BIN")
	if bin == "" {
		if os.Getenv("MONOCEPH_INTEGRATION") == "1" {
			t.Fatal("MONOCEPH_INTEGRATION=1 but MONOCEPH_VAULT_BIN is unset: run make test-vault, or make bin/vault and point MONOCEPH_VAULT_BIN there")
		}
		t.Skip("MONOCEPH_VAULT_BIN unset: `make bin/vault` builds it")
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := &Server{Addr: fmt.Sprintf("http://127.0.0.1:%d", kubetest.FreePort(t)), Token: "root-" + hex.EncodeToString(b)}
	// the test's own root token is on this command line (dev mode takes it no other way but
	// the environment); the driver's tokens never are
	cmd := exec.Command(bin, "server", "-dev", "-dev-root-token-id="+s.Token, "-dev-listen-address="+s.Addr[len("http://"):], "-dev-no-store-token")
	// HOME for whatever it writes there; nothing of the test's environment (VAULT_*)
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	cmd.Dir = dir
	s.proc = kubetest.StartProcess(t, "vault", filepath.Join(dir, "vault.log"), cmd)
	t.Cleanup(func() { s.proc.Stop(5 * time.Second) })
	c, err := vault.NewClient(&vault.Config{Address: s.Addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(s.Token)
	s.client = c
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		h, err := c.Sys().HealthWithContext(ctx)
		cancel()
		if err == nil && h.Initialized && !h.Sealed {
			break
		}
		if exited, werr := s.proc.Exited(); exited {
			t.Fatalf("vault exited (%v): %s", werr, s.proc.Tail(2000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("vault not ready after 60 s (%v): %s", err, s.proc.Tail(2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}

// Client is a Vault client with the root token.
func (s *Server) Client() *vault.Client { return s.client }

// Secrets is a Kubernetes Secret's data holding token as the Vault token, over base (ceph
// credentials, say), which it does not change.
func Secrets(base map[string]string, token string) map[string]string {
	out := map[string]string{kms.VaultTokenKey: token}
	for k, v := range base {
		if k != kms.VaultTokenKey {
			out[k] = v
		}
	}
	return out
}

// EnableKV mounts a KV version 2 engine at path.
func (s *Server) EnableKV(t testing.TB, path string) {
	t.Helper()
	s.mount(t, path, &vault.MountInput{Type: "kv", Options: map[string]string{"version": "2"}})
}

// EnableTransit mounts the transit engine at path and creates key there.
func (s *Server) EnableTransit(t testing.TB, path, key string) {
	t.Helper()
	s.mount(t, path, &vault.MountInput{Type: "transit"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.client.Logical().WriteWithContext(ctx, path+"/keys/"+key, map[string]any{"type": "aes256-gcm96"}); err != nil {
		t.Fatalf("create transit key %s: %v", key, err)
	}
}

func (s *Server) mount(t testing.TB, path string, in *vault.MountInput) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.client.Sys().MountWithContext(ctx, path, in); err != nil {
		t.Fatalf("mount %s at %s: %v", in.Type, path, err)
	}
}

// Seal seals the server (dev mode does not unseal it again by itself).
func (s *Server) Seal(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.client.Sys().SealWithContext(ctx); err != nil {
		t.Fatalf("seal: %v", err)
	}
}

// Stop ends the server (its data is gone: dev mode keeps it in memory).
func (s *Server) Stop() { s.proc.Stop(5 * time.Second) }
