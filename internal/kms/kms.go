// Package kms is where the keys of encrypted RBD volumes come from: the KMS configuration
// (ceph-csi's csi-kms-connection-details shape), its providers, and the wrapping of a volume's
// data-encryption key (DEK) by a passphrase, in ceph-csi's format.
package kms

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
)

// Keys of ceph-csi's KMS configuration and secrets that monoceph reads.
const (
	// TypeKey names an entry's provider (ceph-csi's file form); ProviderKey is the older
	// ConfigMap form of the same.
	TypeKey     = "encryptionKMSType"
	ProviderKey = "KMS_PROVIDER"
	// PassphraseKey is the passphrase in the provisioner and node-stage secrets.
	PassphraseKey = "encryptionPassphrase"
	// secretNameKey and secretNamespaceKey make a metadata entry read its passphrase from a
	// Secret of their own (through the Kubernetes API), which monoceph does not do yet.
	secretNameKey      = "secretName"
	secretNamespaceKey = "secretNamespace"
)

// Kinds of provider.
const (
	// TypeDefault is the provider of a class without encryptionKMSID: the LUKS passphrase is
	// the secret's encryptionPassphrase, for every volume of the class.
	TypeDefault = "default"
	// TypeMetadata keeps a random per-volume DEK in the image's metadata (MetadataDEKKey),
	// wrapped by the secret's encryptionPassphrase (see Wrap).
	TypeMetadata = "metadata"
)

// Errors that are the caller's input (INVALID_ARGUMENT at the gRPC edge).
var (
	ErrUnknownKMS        = errors.New("unknown KMS ID")
	ErrUnsupported       = errors.New("KMS configuration not supported by monoceph")
	ErrMissingPassphrase = errors.New("missing " + PassphraseKey + " in the secrets")
)

// Entry is one KMS of the configuration.
type Entry struct {
	ID   string
	Type string
	// why, when set, is the reason this entry cannot be used (an unsupported provider or
	// option); it is kept so that a configuration shared with ceph-csi still loads, and a
	// class naming the entry is refused with the reason.
	why string
	// vault is the connection of a Vault entry (TypeVaultTokens, TypeVaultTransit)
	vault *vaultConf
}

// Config is the KMS configuration: entries by KMS ID. The zero value has none (only the
// default provider works).
type Config struct {
	entries map[string]Entry
}

// Load reads the configuration at path; an empty path is an empty configuration.
func Load(path string) (*Config, error) {
	if path == "" {
		return &Config{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("KMS configuration: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("KMS configuration %s: %w", path, err)
	}
	return c, nil
}

// Parse reads a configuration: a JSON object of KMS IDs, each an object (ceph-csi's
// config.json) or a string holding one (the data of ceph-csi's ConfigMap).
func Parse(b []byte) (*Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("want a JSON object of KMS IDs: %w", err)
	}
	c := &Config{entries: map[string]Entry{}}
	for id, v := range raw {
		if id == "" || id == TypeDefault {
			return nil, fmt.Errorf("KMS ID %q is reserved", id)
		}
		section, err := section(v)
		if err != nil {
			return nil, fmt.Errorf("KMS %q: %w", id, err)
		}
		e, err := entry(id, section)
		if err != nil {
			return nil, fmt.Errorf("KMS %q: %w", id, err)
		}
		c.entries[id] = e
	}
	return c, nil
}

func section(v json.RawMessage) (map[string]any, error) {
	var s map[string]any
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var str string
	if err := json.Unmarshal(v, &str); err != nil {
		return nil, errors.New("want an object or a string holding one")
	}
	if err := json.Unmarshal([]byte(str), &s); err != nil {
		return nil, fmt.Errorf("the string does not hold a JSON object: %w", err)
	}
	return s, nil
}

func entry(id string, s map[string]any) (Entry, error) {
	e := Entry{ID: id}
	for _, k := range []string{TypeKey, ProviderKey} {
		if v, ok := s[k]; ok {
			str, ok := v.(string)
			if !ok || str == "" {
				return e, fmt.Errorf("%s: want a provider name", k)
			}
			e.Type = str
			break
		}
	}
	if e.Type == "" {
		return e, fmt.Errorf("names no provider (%s)", TypeKey)
	}
	switch e.Type {
	case TypeMetadata:
		if _, ok := s[secretNameKey]; ok {
			e.why = fmt.Sprintf("%s (the passphrase read from a Secret of its own) is not supported yet: put %s in the class's provisioner and node-stage secrets",
				secretNameKey, PassphraseKey)
		} else if _, ok := s[secretNamespaceKey]; ok {
			e.why = secretNamespaceKey + " is not supported yet"
		}
	case TypeVaultTokens, TypeVaultTransit:
		// an entry in another shape (ceph-csi's ConfigMap form has VAULT_ADDR...) still loads
		if err := vaultEntry(&e, s); err != nil {
			e.why = err.Error()
		}
	default:
		e.why = fmt.Sprintf("provider %q is not supported yet (monoceph has %q, %q, %q and the default)", e.Type, TypeMetadata, TypeVaultTokens, TypeVaultTransit)
	}
	return e, nil
}

// IDs lists the configured KMS IDs, sorted.
func (c *Config) IDs() []string {
	ids := make([]string, 0, len(c.entries))
	for id := range c.entries {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Provider returns the provider type of kmsID ("" or TypeDefault: TypeDefault); an ID that is
// not configured is ErrUnknownKMS, one whose entry monoceph cannot use ErrUnsupported, each
// saying why.
func (c *Config) Provider(kmsID string) (string, error) {
	if kmsID == "" || kmsID == TypeDefault {
		return TypeDefault, nil
	}
	var e Entry
	ok := false
	if c != nil {
		e, ok = c.entries[kmsID]
	}
	if !ok {
		have := "none"
		if c != nil && len(c.entries) > 0 {
			have = strings.Join(c.IDs(), ", ")
		}
		return "", fmt.Errorf("%w %q (configured: %s)", ErrUnknownKMS, kmsID, have)
	}
	if e.why != "" {
		return "", fmt.Errorf("%w: KMS %q: %s", ErrUnsupported, kmsID, e.why)
	}
	return e.Type, nil
}

// Passphrase returns the encryptionPassphrase of secrets (ErrMissingPassphrase without one).
func Passphrase(secrets map[string]string) ([]byte, error) {
	p, ok := secrets[PassphraseKey]
	if !ok || p == "" {
		return nil, ErrMissingPassphrase
	}
	return []byte(p), nil
}

// StateKey is the image metadata key that marks an image monoceph formatted with librbd's
// encryption; its value is an ImageState in JSON. It is set once the LUKS header is written,
// so an image without it was never handed out encrypted.
const StateKey = "monoceph.encryption"

// FormatLUKS2 is the only format monoceph writes.
const FormatLUKS2 = "luks2"

// ImageState is what an encrypted image records about its encryption. No key is in it.
type ImageState struct {
	Format string `json:"format"`
	// KMSID is the class's encryptionKMSID ("" for the default provider).
	KMSID string `json:"kmsID,omitempty"`
	// HeaderBytes is the LUKS header at the start of the image: the image is this much
	// larger than the volume the pod sees.
	HeaderBytes uint64 `json:"headerBytes"`
	// VolumeID is the volume this state (and the wrapped DEK's salt) was written for; a clone
	// inherits its parent's metadata, and finds another volume's ID here.
	VolumeID string `json:"volumeID"`
}

// ParseImageState reads the value of StateKey.
func ParseImageState(v string) (ImageState, error) {
	var s ImageState
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, fmt.Errorf("image metadata %s: %w", StateKey, err)
	}
	if s.Format != FormatLUKS2 {
		return s, fmt.Errorf("image metadata %s: format %q, want %q", StateKey, s.Format, FormatLUKS2)
	}
	return s, nil
}

// String is the value of StateKey.
func (s ImageState) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}
