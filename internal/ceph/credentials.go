package ceph

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/monoceph/monoceph/internal/cephname"
)

// Secret keys the driver reads from every RPC's CSI secrets (the same keys ceph-csi uses, so
// existing Secrets keep working): userID/userKey, or adminID/adminKey, which ceph-csi's CephFS
// provisioner and node-stage Secrets hold.
const (
	SecretUserID   = "userID"
	SecretUserKey  = "userKey"
	SecretAdminID  = "adminID"
	SecretAdminKey = "adminKey"
)

// SecretKeys are the two keys of a Secret that hold one Ceph user.
type SecretKeys struct{ ID, Key string }

// The key pairs of ceph-csi's Secrets.
var (
	UserSecret  = SecretKeys{SecretUserID, SecretUserKey}
	AdminSecret = SecretKeys{SecretAdminID, SecretAdminKey}
	// UserFirst is the order RBD reads them in; AdminFirst CephFS's, as ceph-csi does: its
	// CephFS driver provisions and stages with the admin pair whenever a Secret holds both
	// (the user pair is then meant for static volumes).
	UserFirst  = []SecretKeys{UserSecret, AdminSecret}
	AdminFirst = []SecretKeys{AdminSecret, UserSecret}
)

// Credentials identify a Ceph user. The key never leaves this value except to librados and
// key files: String and GoString redact it, and it is held behind a pointer so that even a
// struct printed with %+v that embeds Credentials in an unexported field (where fmt cannot
// call String) shows an address, not the key.
type Credentials struct {
	ID  string
	key *string
	// aes256k marks a key of the newer type (see keyTypes)
	aes256k bool
}

// keyTypes are the cephx key types: an encoded key is u16 type, 8 bytes of creation time, u16
// secret length and the secret. aes is every release's; aes256k (AES256-CTS-HMAC384-192) is
// what Ceph 20.2.4 and 19.2.6 create by default (CVE-2025-30156), and only libraries of those
// releases read it.
var keyTypes = map[uint16]struct {
	secret  uint16
	aes256k bool
}{1: {16, false}, 2: {32, true}}

// NewCredentials validates an ID and a base64 cephx key.
func NewCredentials(id, key string) (Credentials, error) { return newCredentials(UserSecret, id, key) }

// newCredentials is NewCredentials naming the secret keys they came from in errors.
func newCredentials(k SecretKeys, id, key string) (Credentials, error) {
	id = strings.TrimPrefix(id, "client.")
	if id == "" {
		return Credentials{}, fmt.Errorf("secret %q is missing or empty", k.ID)
	}
	// the ID reaches command lines (--id) and the kernel client's option list (name=): a
	// leading '-' would be an option, a ',' a second mount option
	if err := cephname.Check(id); err != nil {
		return Credentials{}, fmt.Errorf("secret %q is not a Ceph user name: %v", k.ID, err)
	}
	if key == "" {
		return Credentials{}, fmt.Errorf("secret %q is missing or empty", k.Key)
	}
	// librados prints a key it cannot decode to stderr, so check the structure here
	raw, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(raw) < 12 {
		return Credentials{}, fmt.Errorf("secret %q is not a base64 cephx key", k.Key)
	}
	typ, ok := keyTypes[binary.LittleEndian.Uint16(raw[0:2])]
	if !ok || binary.LittleEndian.Uint16(raw[10:12]) != typ.secret || len(raw) != 12+int(typ.secret) {
		return Credentials{}, fmt.Errorf("secret %q is not a base64 cephx key", k.Key)
	}
	return Credentials{ID: id, key: &key, aes256k: typ.aes256k}, nil
}

// CredentialsFromSecrets reads the first key pair of order (UserFirst when none is given) that
// the secrets hold; an error names the first pair's keys when they hold none.
func CredentialsFromSecrets(secrets map[string]string, order ...SecretKeys) (Credentials, error) {
	if len(order) == 0 {
		order = UserFirst
	}
	for _, k := range order {
		if secrets[k.ID] != "" || secrets[k.Key] != "" {
			return newCredentials(k, secrets[k.ID], secrets[k.Key])
		}
	}
	if len(order) > 1 {
		return Credentials{}, fmt.Errorf("secret %q is missing or empty (and so is %q)", order[0].ID, order[1].ID)
	}
	return newCredentials(order[0], "", "")
}

// Key returns the cephx key, for librados and for the 0600 key files mount helpers read.
func (c Credentials) Key() string {
	if c.key == nil {
		return ""
	}
	return *c.key
}

// String redacts the key.
func (c Credentials) String() string { return "client." + c.ID + " (key redacted)" }

// GoString redacts the key from %#v too.
func (c Credentials) GoString() string { return c.String() }
