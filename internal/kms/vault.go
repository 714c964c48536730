package kms

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	vault "github.com/hashicorp/vault/api"
)

// Vault providers (ceph-csi's configuration keys).
const (
	// TypeVaultTokens keeps each volume's random DEK in a Vault KV v2 secret named by the volume
	// ID ({"passphrase": DEK}, ceph-csi's layout), read with the token of the class's secrets.
	TypeVaultTokens = "vaulttokens"
	// TypeVaultTransit keeps each volume's random DEK in the image's metadata (MetadataDEKKey),
	// encrypted by a Vault transit key: the DEK never rests in Vault, and without Vault (and
	// the token) the metadata does not open.
	TypeVaultTransit = "vaulttransit"

	// VaultTokenKey is the key of the Vault token in the class's provisioner and node-stage
	// secrets (the key of ceph-csi's tenant token Secret).
	VaultTokenKey = "token"
)

// Options of a Vault entry.
const (
	vaultAddressKey     = "vaultAddress"
	vaultBackendKey     = "vaultBackend"
	vaultBackendPathKey = "vaultBackendPath"
	vaultNamespaceKey   = "vaultNamespace"
	vaultCAVerifyKey    = "vaultCAVerify"
	vaultTLSNameKey     = "vaultTLSServerName"
	vaultDestroyKeysKey = "vaultDestroyKeys"
	vaultTransitKeyKey  = "vaultTransitKey"
)

// VaultTimeout bounds every Vault call: a KMS that does not answer must not hold a CreateVolume
// (or a NodeStageVolume) for the CO's whole deadline.
var VaultTimeout = 10 * time.Second

// Errors of a Vault provider.
var (
	// ErrUnavailable: the KMS is unreachable, sealed or overloaded (UNAVAILABLE: retry).
	ErrUnavailable = errors.New("KMS unavailable")
	// ErrDenied: the KMS refused the token of the secrets.
	ErrDenied = errors.New("KMS refused the token")
	// ErrMissingToken: the secrets have no Vault token.
	ErrMissingToken = errors.New("missing " + VaultTokenKey + " (the Vault token) in the secrets")
	// ErrConfig: the KMS configuration (or the driver's environment) is wrong
	// (FAILED_PRECONDITION: no retry helps until the operator changes it).
	ErrConfig = errors.New("KMS misconfigured")
	// ErrInvalid: the KMS entry names something the KMS does not have (INVALID_ARGUMENT).
	ErrInvalid = errors.New("KMS entry invalid")
	// ErrNoDEK: the KMS has no key for the volume.
	ErrNoDEK = errors.New("the KMS has no key for the volume")
)

// vaultConf is a Vault entry's connection and where its keys are.
type vaultConf struct {
	address string
	// path is the KV v2 mount (vaulttokens) or the transit mount (vaulttransit), no slashes
	// around it
	path      string
	namespace string
	// transitKey names the transit key (vaulttransit)
	transitKey    string
	skipVerify    bool
	tlsServerName string
	// destroy removes every version of a deleted volume's DEK (KV metadata); false only marks
	// the latest version deleted
	destroy bool
}

// vaultEntry parses a Vault entry's options; why is set for options monoceph cannot honour.
func vaultEntry(e *Entry, s map[string]any) error {
	str := func(k, def string) (string, error) {
		v, ok := s[k]
		if !ok {
			return def, nil
		}
		out, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%s: want a string", k)
		}
		return out, nil
	}
	boolean := func(k string, def bool) (bool, error) {
		v, err := str(k, strconv.FormatBool(def))
		if err != nil {
			return false, err
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%s: %w", k, err)
		}
		return b, nil
	}
	c := &vaultConf{}
	var err error
	if c.address, err = str(vaultAddressKey, ""); err != nil {
		return err
	}
	if c.address == "" {
		return fmt.Errorf("%s is missing", vaultAddressKey)
	}
	if u, err := url.Parse(c.address); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s %q: want http(s)://host[:port]", vaultAddressKey, c.address)
	}
	defPath := "secret"
	if e.Type == TypeVaultTransit {
		defPath = "transit"
	}
	if c.path, err = str(vaultBackendPathKey, defPath); err != nil {
		return err
	}
	c.path = strings.Trim(c.path, "/")
	if c.namespace, err = str(vaultNamespaceKey, ""); err != nil {
		return err
	}
	if c.tlsServerName, err = str(vaultTLSNameKey, ""); err != nil {
		return err
	}
	verify, err := boolean(vaultCAVerifyKey, true)
	if err != nil {
		return err
	}
	c.skipVerify = !verify
	if c.destroy, err = boolean(vaultDestroyKeysKey, true); err != nil {
		return err
	}
	switch e.Type {
	case TypeVaultTokens:
		backend, err := str(vaultBackendKey, "kv-v2")
		if err != nil {
			return err
		}
		if backend != "kv-v2" {
			e.why = fmt.Sprintf("%s %q is not supported (monoceph keeps DEKs in KV version 2: \"kv-v2\")", vaultBackendKey, backend)
		}
	case TypeVaultTransit:
		if c.transitKey, err = str(vaultTransitKeyKey, ""); err != nil {
			return err
		}
		if c.transitKey == "" {
			return fmt.Errorf("%s (the name of the transit key) is missing", vaultTransitKeyKey)
		}
	}
	// options that read Kubernetes objects of their own (ceph-csi reads them through the API)
	for _, k := range []string{"vaultCAFromSecret", "vaultClientCertFromSecret", "vaultClientCertKeyFromSecret", "tenants"} {
		if _, ok := s[k]; ok && e.why == "" {
			e.why = k + " is not supported yet (the token comes from the class's secrets, key " + VaultTokenKey + ")"
		}
	}
	e.vault = c
	return nil
}

// Vault is a connection to a Vault provider with one token. Safe for concurrent use.
type Vault struct {
	typ    string
	conf   *vaultConf
	client *vault.Client
}

// Vault returns the Vault of kmsID, with the token of secrets (ErrMissingToken without one);
// nil, nil for a provider that is not a Vault one. It makes no call: Check does.
func (c *Config) Vault(kmsID string, secrets map[string]string) (*Vault, error) {
	typ, err := c.Provider(kmsID)
	if err != nil {
		return nil, err
	}
	if typ != TypeVaultTokens && typ != TypeVaultTransit {
		return nil, nil
	}
	// a Secret made with kubectl create secret --from-file=token=... ends with the file's
	// newline, which no Vault token has (and net/http refuses in a header)
	token := strings.TrimSpace(secrets[VaultTokenKey])
	if token == "" {
		return nil, ErrMissingToken
	}
	conf := c.entries[kmsID].vault
	// not vault.DefaultConfig: it reads VAULT_* from the environment, and no setting (least of
	// all a token) may come from there
	cfg := &vault.Config{Address: conf.address, HttpClient: cleanClient(conf), Timeout: VaultTimeout,
		// no retries: a sealed or unreachable Vault is UNAVAILABLE at once, the CO retries
		MaxRetries: 0,
		// the client follows one redirect itself, to any host, with the token and the body
		// (the DEK): see noRedirects
		DisableRedirects: true}
	client, err := vault.NewClient(cfg)
	if err != nil {
		// NewClient parses VAULT_* of the process's environment whatever cfg says (and
		// fails on a VAULT_CACERT it cannot read, a VAULT_SKIP_VERIFY that is no boolean...):
		// none is used, but an error there is the operator's to fix in the driver's pod
		return nil, fmt.Errorf("%w: KMS %q: the Vault client refuses the driver's environment (%s: monoceph takes no Vault setting from there, unset them): %w",
			ErrConfig, kmsID, vaultEnv(), err)
	}
	// NewClient takes VAULT_TOKEN, VAULT_NAMESPACE and VAULT_HEADERS from the environment:
	// each is replaced by the configuration's (or nothing)
	client.SetToken(token)
	h := http.Header{}
	h.Set(vault.RequestHeaderName, "true") // what NewClient sets itself (SSRF protection)
	client.SetHeaders(h)                   // also drops a VAULT_NAMESPACE header
	if conf.namespace != "" {
		client.SetNamespace(conf.namespace)
	}
	return &Vault{typ: typ, conf: conf, client: client}, nil
}

// vaultEnv names the VAULT_* variables of the environment (never their values: one may be a
// token).
func vaultEnv() string {
	var names []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "VAULT_") {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return "no VAULT_* variable is set"
	}
	sort.Strings(names)
	return "set: " + strings.Join(names, ", ")
}

// cleanClient is an HTTP client of its own (no proxy from the environment, no redirects) over
// the shared transport of conf's address and TLS settings.
func cleanClient(conf *vaultConf) *http.Client {
	return &http.Client{Transport: noRedirects{sharedTransport(conf)}, Timeout: VaultTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// transportKey is what a transport depends on.
type transportKey struct {
	address, tlsServerName string
	skipVerify             bool
}

// transports are the Vault transports, one per address and TLS settings: a transport per call
// kept its idle connections (and their two goroutines each) for IdleConnTimeout after every
// CreateVolume or NodeStageVolume.
var transports struct {
	sync.Mutex
	m map[transportKey]*http.Transport
}

func sharedTransport(conf *vaultConf) *http.Transport {
	k := transportKey{address: conf.address, tlsServerName: conf.tlsServerName, skipVerify: conf.skipVerify}
	transports.Lock()
	defer transports.Unlock()
	if tr := transports.m[k]; tr != nil {
		return tr
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: VaultTimeout}).DialContext,
		TLSHandshakeTimeout: VaultTimeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: conf.tlsServerName,
			InsecureSkipVerify: conf.skipVerify}, //nolint:gosec // the operator's vaultCAVerify: "false"
	}
	if transports.m == nil {
		transports.m = map[transportKey]*http.Transport{}
	}
	transports.m[k] = tr
	return tr
}

// errRedirect: Vault answered with a redirect, which monoceph does not follow.
var errRedirect = errors.New("redirect refused")

// noRedirects turns every 3xx answer into an error. A redirect (a standby's 307 to the active
// node, or anything between) would send the token and the request's body, a DEK, to another
// host, possibly in the clear; and not followed, the vault client takes a 3xx for a success.
type noRedirects struct{ rt http.RoundTripper }

func (n noRedirects) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := n.rt.RoundTrip(req)
	if err != nil || resp.StatusCode < 300 || resp.StatusCode > 399 {
		return resp, err
	}
	_ = resp.Body.Close()
	return nil, fmt.Errorf("%w: %w: Vault answered HTTP %d (to %q): set %s to the address that answers itself (the active node)",
		ErrConfig, errRedirect, resp.StatusCode, resp.Header.Get("Location"), vaultAddressKey)
}

// Type is the provider type (TypeVaultTokens or TypeVaultTransit).
func (v *Vault) Type() string { return v.typ }

// call runs fn with a context bounded by VaultTimeout and classifies its error.
func call[T any](ctx context.Context, what string, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, VaultTimeout)
	defer cancel()
	out, err := fn(ctx)
	if err != nil {
		return out, classify(what, err)
	}
	return out, nil
}

// classify wraps err with ErrUnavailable (retry later) or ErrDenied (fix the token); the text
// keeps Vault's own reason (never the token: the client does not put it in errors).
func classify(what string, err error) error {
	var re *vault.ResponseError
	if errors.As(err, &re) {
		switch {
		case re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusUnauthorized:
			return fmt.Errorf("%w: Vault %s: %v", ErrDenied, what, strings.Join(re.Errors, "; "))
		case re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= 500:
			return fmt.Errorf("%w: Vault %s: HTTP %d: %v", ErrUnavailable, what, re.StatusCode, strings.Join(re.Errors, "; "))
		}
		return fmt.Errorf("vault %s: HTTP %d: %v", what, re.StatusCode, strings.Join(re.Errors, "; "))
	}
	if errors.Is(err, ErrConfig) {
		return fmt.Errorf("vault %s: %w", what, err)
	}
	var ne net.Error
	var ue *url.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || errors.As(err, &ue) {
		return fmt.Errorf("%w: Vault %s: %v", ErrUnavailable, what, err)
	}
	return fmt.Errorf("vault %s: %w", what, err)
}

// Check asks Vault whether it is unsealed, takes the token and lets it do what the provider
// will (sys/capabilities-self: create and update of a KV secret, transit encrypt and decrypt;
// ErrDenied naming the path), and with transit whether the key exists (ErrInvalid naming
// vaultTransitKey, when the token may read it), before a caller writes anything that would need
// Vault next.
func (v *Vault) Check(ctx context.Context) error {
	if err := v.reachable(ctx); err != nil {
		return err
	}
	if v.typ == TypeVaultTokens {
		// the volume's ID is not known yet: a probe name stands for it (policies grant
		// <mount>/data/* or a prefix of it)
		return v.can(ctx, v.conf.path+"/data/"+capabilityProbe, "create", "update")
	}
	for _, op := range []string{"encrypt", "decrypt"} {
		if err := v.can(ctx, v.conf.path+"/"+op+"/"+v.conf.transitKey, "update"); err != nil {
			return err
		}
	}
	keyPath := v.conf.path + "/keys/" + v.conf.transitKey
	if v.can(ctx, keyPath, "read") != nil {
		return nil // the key's existence shows at the first encrypt (the policy need not grant read)
	}
	key, err := call(ctx, "read the transit key", func(ctx context.Context) (*vault.Secret, error) {
		return v.client.Logical().ReadWithContext(ctx, keyPath)
	})
	if err != nil {
		return err
	}
	if key == nil {
		return fmt.Errorf("%w: Vault has no transit key %s (%s %q, %s %q)", ErrInvalid, keyPath,
			vaultTransitKeyKey, v.conf.transitKey, vaultBackendPathKey, v.conf.path)
	}
	return nil
}

// CheckRemove asks Vault whether Remove of volumeID's DEK would succeed (unsealed, the token
// taken and allowed to delete it), before a caller destroys what the DEK opens: a volume
// deleted with a token that cannot delete its DEK would leave the DEK behind for good. No-op
// with transit.
func (v *Vault) CheckRemove(ctx context.Context, volumeID string) error {
	if v.typ != TypeVaultTokens {
		return nil
	}
	if err := v.reachable(ctx); err != nil {
		return err
	}
	return v.can(ctx, v.removePath(volumeID), "delete")
}

// removePath is the path Remove deletes: the metadata (every version) or the latest version.
func (v *Vault) removePath(volumeID string) string {
	if v.conf.destroy {
		return v.conf.path + "/metadata/" + volumeID
	}
	return v.conf.path + "/data/" + volumeID
}

// reachable: Vault is unsealed and takes the token.
func (v *Vault) reachable(ctx context.Context) error {
	h, err := call(ctx, "health", func(ctx context.Context) (*vault.HealthResponse, error) {
		return v.client.Sys().HealthWithContext(ctx)
	})
	if err != nil {
		return err
	}
	if !h.Initialized || h.Sealed {
		return fmt.Errorf("%w: Vault at %s is sealed or not initialised", ErrUnavailable, v.conf.address)
	}
	_, err = call(ctx, "token lookup", func(ctx context.Context) (*vault.Secret, error) {
		return v.client.Auth().Token().LookupSelfWithContext(ctx)
	})
	return err
}

// capabilityProbe is the KV secret name whose capabilities Check asks for.
const capabilityProbe = "monoceph-capability-probe"

// can returns ErrDenied unless the token has every one of caps on path.
func (v *Vault) can(ctx context.Context, path string, caps ...string) error {
	got, err := call(ctx, "capabilities of "+path, func(ctx context.Context) ([]string, error) {
		return v.client.Sys().CapabilitiesSelfWithContext(ctx, path)
	})
	if err != nil {
		return err
	}
	if slices.Contains(got, "root") {
		return nil
	}
	var missing []string
	for _, c := range caps {
		if !slices.Contains(got, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the token's policies do not grant %s on %s (they grant %v)", ErrDenied,
			strings.Join(missing, ", "), path, got)
	}
	return nil
}

// dekField is the field of a KV secret that holds the DEK (ceph-csi's).
const dekField = "passphrase"

// Seal puts dek in the KMS for volumeID: with KV it stores it there and returns "", with transit
// it returns the ciphertext, for the image's metadata (MetadataDEKKey).
func (v *Vault) Seal(ctx context.Context, volumeID string, dek []byte) (string, error) {
	if v.typ == TypeVaultTransit {
		s, err := call(ctx, "transit encrypt", func(ctx context.Context) (*vault.Secret, error) {
			return v.client.Logical().WriteWithContext(ctx, v.conf.path+"/encrypt/"+v.conf.transitKey,
				map[string]any{"plaintext": base64.StdEncoding.EncodeToString(dek)})
		})
		if err != nil {
			return "", err
		}
		ct, _ := dataString(s, "ciphertext")
		if ct == "" {
			return "", errors.New("vault transit encrypt: no ciphertext in the answer")
		}
		return ct, nil
	}
	_, err := call(ctx, "store the DEK", func(ctx context.Context) (*vault.KVSecret, error) {
		return v.client.KVv2(v.conf.path).Put(ctx, volumeID, map[string]any{dekField: string(dek)})
	})
	return "", err
}

// Open returns the DEK of volumeID: with KV from Vault, with transit by decrypting sealed (the
// value Seal returned). A KV volume without a DEK is ErrNoDEK.
func (v *Vault) Open(ctx context.Context, volumeID, sealed string) ([]byte, error) {
	if v.typ == TypeVaultTransit {
		s, err := call(ctx, "transit decrypt", func(ctx context.Context) (*vault.Secret, error) {
			return v.client.Logical().WriteWithContext(ctx, v.conf.path+"/decrypt/"+v.conf.transitKey,
				map[string]any{"ciphertext": sealed})
		})
		if err != nil {
			return nil, err
		}
		pt, _ := dataString(s, "plaintext")
		dek, err := base64.StdEncoding.DecodeString(pt)
		if err != nil || len(dek) == 0 {
			return nil, errors.New("vault transit decrypt: no plaintext in the answer")
		}
		return dek, nil
	}
	s, err := call(ctx, "read the DEK", func(ctx context.Context) (*vault.KVSecret, error) {
		return v.client.KVv2(v.conf.path).Get(ctx, volumeID)
	})
	if errors.Is(err, vault.ErrSecretNotFound) {
		return nil, fmt.Errorf("%w: Vault has no secret %s/%s", ErrNoDEK, v.conf.path, volumeID)
	}
	if err != nil {
		return nil, err
	}
	dek, _ := s.Data[dekField].(string)
	if dek == "" {
		return nil, fmt.Errorf("%w: Vault secret %s/%s has no %s", ErrNoDEK, v.conf.path, volumeID, dekField)
	}
	return []byte(dek), nil
}

// Remove deletes the DEK of volumeID from KV (a no-op with transit, whose DEK lives and goes
// with the image). A DEK already gone is no error.
func (v *Vault) Remove(ctx context.Context, volumeID string) error {
	if v.typ != TypeVaultTokens {
		return nil
	}
	_, err := call(ctx, "delete the DEK", func(ctx context.Context) (struct{}, error) {
		kv := v.client.KVv2(v.conf.path)
		var err error
		if v.conf.destroy {
			err = kv.DeleteMetadata(ctx, volumeID)
		} else {
			err = kv.Delete(ctx, volumeID)
		}
		var re *vault.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
			err = nil
		}
		return struct{}{}, err
	})
	return err
}

func dataString(s *vault.Secret, k string) (string, bool) {
	if s == nil || s.Data == nil {
		return "", false
	}
	v, ok := s.Data[k].(string)
	return v, ok
}
