package node

import (
	"context"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStageEncryption(t *testing.T) {
	cfg, err := kms.Parse([]byte(`{"meta":{"encryptionKMSType":"metadata"},"v":{"encryptionKMSType":"vault"},
		"kv":{"encryptionKMSType":"vaulttokens","vaultAddress":"http://127.0.0.1:1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	withPass := map[string]string{"userID": "u", "userKey": "k", kms.PassphraseKey: "pw"}
	for _, tt := range []struct {
		name    string
		kms     *kms.Config
		kmsID   string
		secrets map[string]string
		wrapped bool
		errText string
	}{
		{"default", cfg, "", withPass, false, ""},
		{"default without a configuration", nil, "", withPass, false, ""},
		{"metadata", cfg, "meta", withPass, true, ""},
		{"unknown KMS", cfg, "gone", withPass, false, `volume_context["encryptionKMSID"]: unknown KMS ID "gone"`},
		{"KMS the node lacks", nil, "meta", withPass, false, "configured: none"},
		{"unsupported KMS", cfg, "v", withPass, false, `"vault" is not supported yet`},
		{"Vault without a token", cfg, "kv", withPass, false, `KMS "kv": missing token`},
		{"no passphrase", cfg, "meta", map[string]string{"userID": "u", "userKey": "k"}, false, "missing encryptionPassphrase"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{opts: Options{KMS: tt.kms}}
			r := stageRequest{volumeID: "rv1:c:1::u", image: volumecontext.Image{Encrypted: true, Librbd: true, KMSID: tt.kmsID}}
			enc, err := s.encryption(context.Background(), r, "", tt.secrets)
			if tt.errText != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want INVALID_ARGUMENT saying %q", err, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(enc.Passphrase) != "pw" || enc.Wrapped != tt.wrapped || enc.VolumeID != r.volumeID {
				t.Fatalf("encryption %v, want wrapped %v for %s", enc, tt.wrapped, r.volumeID)
			}
			if strings.Contains(enc.String(), "pw") {
				t.Fatalf("String() shows the passphrase: %s", enc)
			}
		})
	}
}
