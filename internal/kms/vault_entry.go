package kms

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
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
	opts := vaultOptions(s)
	c, err := vaultConnection(e.Type, opts)
	if err != nil {
		return err
	}
	if err := vaultProviderOptions(e, opts, c); err != nil {
		return err
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

// vaultOptions are the options of a Vault entry, as the configuration's JSON holds them.
type vaultOptions map[string]any

// str is option k, def when it is absent.
func (s vaultOptions) str(k, def string) (string, error) {
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

// boolean is option k (a string, as ceph-csi writes it), def when it is absent.
func (s vaultOptions) boolean(k string, def bool) (bool, error) {
	v, err := s.str(k, strconv.FormatBool(def))
	if err != nil {
		return false, err
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: %w", k, err)
	}
	return b, nil
}

// vaultConnection parses the options both Vault providers (typ) have: where Vault is, how to
// reach it, its mount and what Remove does.
func vaultConnection(typ string, s vaultOptions) (*vaultConf, error) {
	c := &vaultConf{}
	var err error
	if c.address, err = s.str(vaultAddressKey, ""); err != nil {
		return nil, err
	}
	if c.address == "" {
		return nil, fmt.Errorf("%s is missing", vaultAddressKey)
	}
	if u, err := url.Parse(c.address); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s %q: want http(s)://host[:port]", vaultAddressKey, c.address)
	}
	defPath := "secret"
	if typ == TypeVaultTransit {
		defPath = "transit"
	}
	if c.path, err = s.str(vaultBackendPathKey, defPath); err != nil {
		return nil, err
	}
	c.path = strings.Trim(c.path, "/")
	if c.namespace, err = s.str(vaultNamespaceKey, ""); err != nil {
		return nil, err
	}
	if c.tlsServerName, err = s.str(vaultTLSNameKey, ""); err != nil {
		return nil, err
	}
	verify, err := s.boolean(vaultCAVerifyKey, true)
	if err != nil {
		return nil, err
	}
	c.skipVerify = !verify
	if c.destroy, err = s.boolean(vaultDestroyKeysKey, true); err != nil {
		return nil, err
	}
	return c, nil
}

// vaultProviderOptions parses the options of e's provider into c: the KV version of
// vaulttokens (why is set for one monoceph cannot use), the transit key of vaulttransit.
func vaultProviderOptions(e *Entry, s vaultOptions, c *vaultConf) error {
	switch e.Type {
	case TypeVaultTokens:
		backend, err := s.str(vaultBackendKey, "kv-v2")
		if err != nil {
			return err
		}
		if backend != "kv-v2" {
			e.why = fmt.Sprintf("%s %q is not supported (monoceph keeps DEKs in KV version 2: \"kv-v2\")", vaultBackendKey, backend)
		}
	case TypeVaultTransit:
		var err error
		if c.transitKey, err = s.str(vaultTransitKeyKey, ""); err != nil {
			return err
		}
		if c.transitKey == "" {
			return fmt.Errorf("%s (the name of the transit key) is missing", vaultTransitKeyKey)
		}
	}
	return nil
}
