package kms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/crypto/scrypt"
)

// MetadataDEKKey is the image metadata key of a wrapped DEK (ceph-csi's).
const MetadataDEKKey = "rbd.csi.ceph.com/dek"

// dekBytes is the entropy of a new DEK: ceph-csi's 20 bytes (160 bits, RFC 6749 10.10), as
// base64url text, which is what LUKS is given as the passphrase of the volume's key slot.
const dekBytes = 20

// ErrWrongPassphrase: a wrapped DEK does not open with the passphrase (or not for this volume).
var ErrWrongPassphrase = errors.New("the passphrase does not unwrap the volume's key")

// NewDEK returns a random DEK.
func NewDEK() ([]byte, error) {
	b := make([]byte, dekBytes)
	defer clear(b) // the DEK is its encoding; no other copy lingers
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	out := make([]byte, base64.URLEncoding.EncodedLen(len(b)))
	base64.URLEncoding.Encode(out, b)
	return out, nil
}

// wrapped is a DEK sealed with AES-256-GCM and its nonce, as ceph-csi stores it in the image
// metadata ({"dek":"<base64>","nonce":"<base64>"}).
type wrapped struct {
	DEK   []byte `json:"dek"`
	Nonce []byte `json:"nonce"`
}

// Wrap seals dek with a key derived from passphrase, salted with the volume ID (ceph-csi's
// scrypt N=32768, r=8, p=1): the value of MetadataDEKKey.
func Wrap(passphrase []byte, volumeID string, dek []byte) (string, error) {
	aead, err := keyCipher(passphrase, volumeID)
	if err != nil {
		return "", err
	}
	w := wrapped{Nonce: make([]byte, aead.NonceSize())}
	if _, err := rand.Read(w.Nonce); err != nil {
		return "", err
	}
	w.DEK = aead.Seal(nil, w.Nonce, dek, nil)
	b, err := json.Marshal(w)
	return string(b), err
}

// Unwrap opens what Wrap sealed for volumeID; a wrong passphrase or volume ID is
// ErrWrongPassphrase.
func Unwrap(passphrase []byte, volumeID, value string) ([]byte, error) {
	var w wrapped
	if err := json.Unmarshal([]byte(value), &w); err != nil {
		return nil, fmt.Errorf("wrapped DEK: %w", err)
	}
	aead, err := keyCipher(passphrase, volumeID)
	if err != nil {
		return nil, err
	}
	if len(w.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("wrapped DEK: nonce of %d bytes, want %d", len(w.Nonce), aead.NonceSize())
	}
	dek, err := aead.Open(nil, w.Nonce, w.DEK, nil)
	if err != nil {
		return nil, ErrWrongPassphrase
	}
	return dek, nil
}

func keyCipher(passphrase []byte, salt string) (cipher.AEAD, error) {
	key, err := scrypt.Key(passphrase, []byte(salt), 32768, 8, 1, 32)
	if err != nil {
		return nil, err
	}
	defer clear(key) // the cipher keeps its own expanded key; no copy of this one lingers
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
