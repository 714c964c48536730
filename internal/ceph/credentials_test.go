package ceph

import (
	"fmt"
	"strings"
	"testing"
)

const testKey = "AQDrzwFrbERaOBAAIC0hFOr9eFaKm3LeRoT64w=="

// aes256kKey has the form of the keys Ceph 20.2.4 creates by default (type 2, 32-byte secret).
const aes256kKey = "AgCVcgVrAAAAACAAAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

func TestCredentialsFromSecrets(t *testing.T) {
	tests := []struct {
		name    string
		secrets map[string]string
		wantID  string
		wantErr string
	}{
		{"ok", map[string]string{"userID": "admin", "userKey": testKey}, "admin", ""},
		{"client prefix", map[string]string{"userID": "client.csi", "userKey": testKey}, "csi", ""},
		{"nil map", nil, "", `"userID" is missing`},
		{"no key", map[string]string{"userID": "admin"}, "", `"userKey" is missing`},
		{"bad id", map[string]string{"userID": "a b", "userKey": testKey}, "", "not a Ceph user name"},
		{"underscore and dot", map[string]string{"userID": "csi_rbd.node-1", "userKey": testKey}, "csi_rbd.node-1", ""},
		// the ID goes into the kernel client's option list (name=<id>) and onto command lines (--id)
		{"second mount option", map[string]string{"userID": "admin,secretfile=/etc/shadow", "userKey": testKey}, "", "not a Ceph user name"},
		{"comma", map[string]string{"userID": "admin,noexec", "userKey": testKey}, "", "not a Ceph user name"},
		{"option", map[string]string{"userID": "-oX", "userKey": testKey}, "", "not a Ceph user name"},
		{"option after the prefix", map[string]string{"userID": "client.--keyfile", "userKey": testKey}, "", "not a Ceph user name"},
		{"path", map[string]string{"userID": "../../../dev/sda", "userKey": testKey}, "", "not a Ceph user name"},
		{"newline", map[string]string{"userID": "admin\nkey = x", "userKey": testKey}, "", "not a Ceph user name"},
		{"prefix only", map[string]string{"userID": "client.", "userKey": testKey}, "", `"userID" is missing`},
		{"not base64", map[string]string{"userID": "admin", "userKey": "not base64 !"}, "", "not a base64"},
		{"base64 but no key", map[string]string{"userID": "admin", "userKey": "AQBtb25vY2VwaC10ZXN0LXNlY3JldC1rZXkteHl6"}, "", "not a base64"},
		{"wrong type", map[string]string{"userID": "admin", "userKey": "AwDrzwFrbERaOBAAIC0hFOr9eFaKm3LeRoT64w=="}, "", "not a base64"},
		// Tentacle's default key type (aes256k): 32-byte secret
		{"aes256k", map[string]string{"userID": "admin", "userKey": aes256kKey}, "admin", ""},
		{"aes256k with a 16-byte secret", map[string]string{"userID": "admin", "userKey": "AgDrzwFrbERaOBAAIC0hFOr9eFaKm3LeRoT64w=="}, "", "not a base64"},
		{"aes with a 32-byte secret", map[string]string{"userID": "admin", "userKey": "AQCVcgVrAAAAACAAAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}, "", "not a base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := CredentialsFromSecrets(tt.secrets)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "not base64 !") {
					t.Fatalf("error echoes the key: %v", err)
				}
				return
			}
			if err != nil || c.ID != tt.wantID || c.Key() != tt.secrets["userKey"] {
				t.Fatalf("got %q/%v", c.ID, err)
			}
		})
	}
}

// TestCredentialsOrder: ceph-csi's Secrets hold userID/userKey (RBD) or adminID/adminKey
// (CephFS provisioner and node-stage), sometimes both; CephFS prefers the admin pair as ceph-csi
// does.
func TestCredentialsOrder(t *testing.T) {
	const other = "AQCsUQVrMT9VIhAA/GQsycKagbBsFJdImNZzpw=="
	both := map[string]string{"userID": "csi-user", "userKey": testKey, "adminID": "csi-admin", "adminKey": other}
	for _, tt := range []struct {
		name    string
		secrets map[string]string
		order   []SecretKeys
		wantID  string
		wantErr string
	}{
		{"user first, both", both, nil, "csi-user", ""},
		{"admin first, both", both, AdminFirst, "csi-admin", ""},
		{"admin only, user first", map[string]string{"adminID": "csi-admin", "adminKey": other}, UserFirst, "csi-admin", ""},
		{"user only, admin first", map[string]string{"userID": "csi-user", "userKey": testKey}, AdminFirst, "csi-user", ""},
		{"admin pair half set", map[string]string{"adminID": "csi-admin"}, AdminFirst, "", `"adminKey" is missing`},
		{"neither, admin first", map[string]string{"foo": "bar"}, AdminFirst, "", `"adminID" is missing`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := CredentialsFromSecrets(tt.secrets, tt.order...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.ID != tt.wantID {
				t.Fatalf("got %q, %v; want %q", c.ID, err, tt.wantID)
			}
		})
	}
}

func TestCredentialsNeverFormatTheKey(t *testing.T) {
	c, err := NewCredentials("admin", testKey)
	if err != nil {
		t.Fatal(err)
	}
	type holder struct {
		name string
		cred Credentials // unexported: fmt cannot call String on it
	}
	type exported struct{ Cred Credentials }
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		for _, v := range []any{c, &c, holder{"x", c}, &holder{"x", c}, exported{c}, []Credentials{c}, map[string]Credentials{"a": c}} {
			if out := fmt.Sprintf(f, v); strings.Contains(out, testKey) || strings.Contains(out, testKey[:12]) {
				t.Errorf("fmt %s of %T leaks the key: %s", f, v, out)
			}
		}
	}
}
