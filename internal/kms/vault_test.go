package kms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	vault "github.com/hashicorp/vault/api"
)

func TestVaultClassify(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want error
		text string
	}{
		{"token refused", &vault.ResponseError{StatusCode: 403, Errors: []string{"permission denied"}}, ErrDenied, "permission denied"},
		{"sealed", &vault.ResponseError{StatusCode: 503, Errors: []string{"Vault is sealed"}}, ErrUnavailable, "Vault is sealed"},
		{"rate limited", &vault.ResponseError{StatusCode: 429}, ErrUnavailable, "HTTP 429"},
		{"refused connection", &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: syscall.ECONNREFUSED}, ErrUnavailable, "connection refused"},
		{"deadline", context.DeadlineExceeded, ErrUnavailable, "deadline"},
		{"bad request", &vault.ResponseError{StatusCode: 400, Errors: []string{"no such key"}}, nil, "HTTP 400: no such key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := classify("op", tt.err)
			for _, e := range []error{ErrDenied, ErrUnavailable} {
				if errors.Is(err, e) != (e == tt.want) {
					t.Fatalf("classify = %v; is %v: %v, want %v", err, e, errors.Is(err, e), e == tt.want)
				}
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Fatalf("classify = %v, want it to say %q", err, tt.text)
			}
		})
	}
}

// vaultAt is the Vault of a KV entry (or a transit one, with transit) at addr, with token.
func vaultAt(t *testing.T, addr, token string, transit bool) *Vault {
	t.Helper()
	entry := `{"v": {"encryptionKMSType": "vaulttokens", "vaultAddress": %q}}`
	if transit {
		entry = `{"v": {"encryptionKMSType": "vaulttransit", "vaultAddress": %q, "vaultTransitKey": "k"}}`
	}
	cfg, err := Parse([]byte(fmt.Sprintf(entry, addr)))
	if err != nil {
		t.Fatal(err)
	}
	v, err := cfg.Vault("v", map[string]string{VaultTokenKey: token})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestVaultRefusesRedirects: a Vault answering 307 elsewhere gets an error (ErrConfig), and the
// other host sees neither the token nor the DEK.
func TestVaultRefusesRedirects(t *testing.T) {
	var got atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Vault-Token") != "" || len(body) > 0 {
			got.Add(1)
		}
		_, _ = io.WriteString(w, `{"data": {"ciphertext": "vault:v1:x", "data": {}}}`)
	}))
	defer other.Close()
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	ctx := context.Background()
	for _, transit := range []bool{false, true} {
		v := vaultAt(t, redirector.URL, "s.secret", transit)
		for name, fn := range map[string]func() error{
			"check": func() error { return v.Check(ctx) },
			"seal":  func() error { _, err := v.Seal(ctx, "vol", []byte("the-dek")); return err },
			"open":  func() error { _, err := v.Open(ctx, "vol", "vault:v1:x"); return err },
		} {
			if err := fn(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "307") {
				t.Errorf("transit %v, %s: %v, want ErrConfig saying 307", transit, name, err)
			}
		}
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("the redirect's target got the token or a body %d times", n)
	}
}

// TestVaultSharesConnections: many Vault calls, each with a Vault of its own (as CreateVolume and
// NodeStageVolume make them), leave a few idle connections, not one (and its goroutines) each.
func TestVaultSharesConnections(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"initialized": true, "sealed": false, "data": {"capabilities": ["root"]}}`)
	}))
	defer srv.Close()
	before := runtime.NumGoroutine()
	for range 30 {
		if err := vaultAt(t, srv.URL, "s.token", false).Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // let closed connections' goroutines end
	// one idle connection: its client side (read and write loops) and its server side
	if d := runtime.NumGoroutine() - before; d > 6 {
		t.Fatalf("%d goroutines more after 30 calls, want a few (one shared connection)", d)
	}
}

// TestVaultIgnoresEnvironment: VAULT_* variables the vault client cannot parse make a Vault
// ErrConfig naming the variable; the ones it can parse change nothing (no token, namespace or
// header from there).
func TestVaultIgnoresEnvironment(t *testing.T) {
	for _, tt := range []struct{ name, value string }{
		{"VAULT_CACERT", "/nonexistent"},
		{"VAULT_CLIENT_CERT", "/nonexistent"},
		{"VAULT_SKIP_VERIFY", "maybe"},
		{"VAULT_MAX_RETRIES", "many"},
		{"VAULT_HEADERS", "{"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(tt.name, tt.value)
			if tt.name == "VAULT_CLIENT_CERT" {
				t.Setenv("VAULT_CLIENT_KEY", "/nonexistent")
			}
			cfg, err := Parse([]byte(`{"v": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://127.0.0.1:1"}}`))
			if err != nil {
				t.Fatal(err)
			}
			_, err = cfg.Vault("v", map[string]string{VaultTokenKey: "s.token"})
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.name) || strings.Contains(err.Error(), "s.token") {
				t.Fatalf("Vault with %s=%q: %v, want ErrConfig naming %s", tt.name, tt.value, err, tt.name)
			}
		})
	}
	t.Run("parsed ones", func(t *testing.T) {
		var token, ns, hdr string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, ns, hdr = r.Header.Get("X-Vault-Token"), r.Header.Get("X-Vault-Namespace"), r.Header.Get("X-Env")
			_, _ = io.WriteString(w, `{"initialized": true, "sealed": false, "data": {"capabilities": ["root"]}}`)
		}))
		defer srv.Close()
		t.Setenv("VAULT_TOKEN", "s.env")
		t.Setenv("VAULT_NAMESPACE", "env-ns")
		t.Setenv("VAULT_HEADERS", `{"X-Env": "1"}`)
		if err := vaultAt(t, srv.URL, "s.token", false).Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		if token != "s.token" || ns != "" || hdr != "" {
			t.Fatalf("Vault got token %q, namespace %q, header %q: want the secret's token and nothing from the environment", token, ns, hdr)
		}
	})
}

// TestVaultTrimsToken: the token of a Secret made from a file (with its newline) works.
func TestVaultTrimsToken(t *testing.T) {
	var token string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token = r.Header.Get("X-Vault-Token")
		_, _ = io.WriteString(w, `{"initialized": true, "sealed": false, "data": {"capabilities": ["root"]}}`)
	}))
	defer srv.Close()
	for _, in := range []string{"s.token\n", " s.token\r\n", "\ts.token"} {
		if err := vaultAt(t, srv.URL, in, false).Check(context.Background()); err != nil || token != "s.token" {
			t.Fatalf("token %q: Vault got %q (%v), want %q", in, token, err, "s.token")
		}
	}
	cfg, err := Parse([]byte(`{"v": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://127.0.0.1:1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Vault("v", map[string]string{VaultTokenKey: " \n"}); !errors.Is(err, ErrMissingToken) {
		t.Fatalf("a blank token: %v, want ErrMissingToken", err)
	}
}
