package kms

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name    string
		in      string
		wantErr string
		ids     []string
	}{
		{"file form", `{"meta":{"encryptionKMSType":"metadata"}}`, "", []string{"meta"}},
		{"configmap form", `{"meta":"{\"encryptionKMSType\":\"metadata\"}"}`, "", []string{"meta"}},
		{"older provider key", `{"m":{"KMS_PROVIDER":"metadata"}}`, "", []string{"m"}},
		{"vault kept for the refusal", `{"v":{"encryptionKMSType":"vault","vaultAddress":"http://v:8200"},"m":{"encryptionKMSType":"metadata"}}`, "", []string{"m", "v"}},
		{"empty", `{}`, "", []string{}},
		{"not an object", `[]`, "JSON object", nil},
		{"no provider", `{"x":{"secretName":"s"}}`, "names no provider", nil},
		{"provider not a string", `{"x":{"encryptionKMSType":3}}`, "want a provider name", nil},
		{"string holding no object", `{"x":"nope"}`, "does not hold", nil},
		{"reserved default", `{"default":{"encryptionKMSType":"metadata"}}`, "reserved", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(c.IDs(), ","); got != strings.Join(tt.ids, ",") {
				t.Fatalf("IDs = %q, want %q", got, tt.ids)
			}
		})
	}
}

func TestProvider(t *testing.T) {
	c, err := Parse([]byte(`{
		"meta": {"encryptionKMSType": "metadata"},
		"own-secret": {"encryptionKMSType": "metadata", "secretName": "kek", "secretNamespace": "ns"},
		"vault": {"encryptionKMSType": "vault", "vaultAddress": "http://v:8200"},
		"kv": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://v:8200"},
		"transit": {"encryptionKMSType": "vaulttransit", "vaultAddress": "https://v:8200", "vaultTransitKey": "k"},
		"kv1": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://v:8200", "vaultBackend": "kv"},
		"ca": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://v:8200", "vaultCAFromSecret": "vault-ca"},
		"no-address": {"KMS_PROVIDER": "vaulttokens", "VAULT_ADDR": "http://v:8200"},
		"not-url": {"encryptionKMSType": "vaulttokens", "vaultAddress": "v:8200"},
		"no-transit-key": {"encryptionKMSType": "vaulttransit", "vaultAddress": "http://v"},
		"bad-bool": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://v", "vaultCAVerify": "maybe"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id, want string
		err      error
		errText  string
	}{
		{"", TypeDefault, nil, ""},
		{"default", TypeDefault, nil, ""},
		{"meta", TypeMetadata, nil, ""},
		{"nope", "", ErrUnknownKMS, "configured: bad-bool, ca, kv, kv1, meta, no-address, no-transit-key, not-url, own-secret, transit, vault"},
		{"own-secret", "", ErrUnsupported, "secretName"},
		{"vault", "", ErrUnsupported, `"vault" is not supported yet`},
		{"kv", TypeVaultTokens, nil, ""},
		{"transit", TypeVaultTransit, nil, ""},
		{"kv1", "", ErrUnsupported, `vaultBackend "kv" is not supported`},
		{"ca", "", ErrUnsupported, "vaultCAFromSecret is not supported yet"},
		{"no-address", "", ErrUnsupported, "vaultAddress is missing"},
		{"not-url", "", ErrUnsupported, "want http(s)://"},
		{"no-transit-key", "", ErrUnsupported, "vaultTransitKey"},
		{"bad-bool", "", ErrUnsupported, "vaultCAVerify"},
	} {
		t.Run(tt.id, func(t *testing.T) {
			got, err := c.Provider(tt.id)
			if !errors.Is(err, tt.err) || (err != nil && !strings.Contains(err.Error(), tt.errText)) {
				t.Fatalf("err = %v, want %v with %q", err, tt.err, tt.errText)
			}
			if got != tt.want {
				t.Fatalf("Provider(%q) = %q, want %q", tt.id, got, tt.want)
			}
		})
	}
	var none *Config
	if _, err := none.Provider("meta"); !errors.Is(err, ErrUnknownKMS) || !strings.Contains(err.Error(), "configured: none") {
		t.Fatalf("nil config: %v", err)
	}
}

func TestPassphrase(t *testing.T) {
	for _, tt := range []struct {
		name    string
		secrets map[string]string
		err     error
	}{
		{"present", map[string]string{"userID": "u", PassphraseKey: "pw"}, nil},
		{"missing", map[string]string{"userID": "u"}, ErrMissingPassphrase},
		{"empty", map[string]string{PassphraseKey: ""}, ErrMissingPassphrase},
		{"no secrets", nil, ErrMissingPassphrase},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Passphrase(tt.secrets); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestWrapUnwrap(t *testing.T) {
	const vol = "rv1:local:1::0f0e0d0c"
	dek, err := NewDEK()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewDEK()
	if string(dek) == string(other) || len(dek) != 28 {
		t.Fatalf("DEKs %q and %q: want two different 28-character keys", dek, other)
	}
	value, err := Wrap([]byte("kek"), vol, dek)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(value, string(dek)) {
		t.Fatal("the wrapped value holds the DEK")
	}
	var shape map[string][]byte
	if err := json.Unmarshal([]byte(value), &shape); err != nil || len(shape["nonce"]) != 12 || len(shape["dek"]) != len(dek)+16 || len(shape) != 2 {
		t.Fatalf("wrapped value %s: want ceph-csi's {dek, nonce} (12-byte nonce, sealed DEK + 16-byte tag): %v", value, err)
	}
	tampered := strings.Replace(value, `"dek":"`, `"dek":"A`, 1)
	for _, tt := range []struct {
		name, pass, vol, value string
		err                    error
		errText                string
	}{
		{"round trip", "kek", vol, value, nil, ""},
		{"wrong passphrase", "KEK", vol, value, ErrWrongPassphrase, ""},
		{"another volume's salt", "kek", vol + "x", value, ErrWrongPassphrase, ""},
		{"tampered", "kek", vol, tampered, nil, "wrapped DEK"},
		{"not JSON", "kek", vol, "dek", nil, "wrapped DEK"},
		{"short nonce", "kek", vol, `{"dek":"AAAA","nonce":"AAAA"}`, nil, "nonce of 3 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Unwrap([]byte(tt.pass), tt.vol, tt.value)
			if tt.err == nil && tt.errText == "" {
				if err != nil || string(got) != string(dek) {
					t.Fatalf("Unwrap = %q, %v; want %q", got, err, dek)
				}
				return
			}
			if err == nil || (tt.err != nil && !errors.Is(err, tt.err)) || !strings.Contains(err.Error(), tt.errText) {
				t.Fatalf("err = %v, want %v %q", err, tt.err, tt.errText)
			}
		})
	}
}

func TestVaultToken(t *testing.T) {
	c, err := Parse([]byte(`{"kv": {"encryptionKMSType": "vaulttokens", "vaultAddress": "http://127.0.0.1:1", "vaultBackendPath": "/kv/"},
		"meta": {"encryptionKMSType": "metadata"}}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("VAULT_TOKEN", "from-the-environment")
	t.Setenv("VAULT_ADDR", "http://192.0.2.1:8200")
	t.Setenv("VAULT_NAMESPACE", "from-the-environment")
	for _, tt := range []struct {
		name, id string
		secrets  map[string]string
		err      error
		nilVault bool
	}{
		{"token from the secrets", "kv", map[string]string{VaultTokenKey: "s.tok"}, nil, false},
		{"no token (the environment's is not taken)", "kv", map[string]string{"userID": "u"}, ErrMissingToken, true},
		{"not a Vault provider", "meta", nil, nil, true},
		{"unknown", "nope", nil, ErrUnknownKMS, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, err := c.Vault(tt.id, tt.secrets)
			if !errors.Is(err, tt.err) || (v == nil) != tt.nilVault {
				t.Fatalf("Vault = %v, %v; want nil %v, err %v", v, err, tt.nilVault, tt.err)
			}
			if v == nil {
				return
			}
			if got := v.client.Token(); got != tt.secrets[VaultTokenKey] {
				t.Fatalf("token %q, want the secret's", got)
			}
			if ns := v.client.Namespace(); ns != "" {
				t.Fatalf("namespace %q: want none (the configuration has none)", ns)
			}
			if got := v.client.Address(); got != "http://127.0.0.1:1" || v.conf.path != "kv" {
				t.Fatalf("address %q path %q: want the configuration's, not the environment's", got, v.conf.path)
			}
		})
	}
}
