package kms

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
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

// VaultTimeout bounds every Vault call: a KMS that does not answer must not hold a CreateVolume
// (or a NodeStageVolume) for the CO's whole deadline.
var VaultTimeout = 10 * time.Second

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

// Type is the provider type (TypeVaultTokens or TypeVaultTransit).
func (v *Vault) Type() string { return v.typ }
