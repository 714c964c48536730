package kms

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	vault "github.com/hashicorp/vault/api"
)

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
