package attach

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/kms"
)

// Encryption opens an image monoceph formatted with librbd's LUKS encryption (kms.StateKey).
// It is key material: it lives in process memory and travels only over the mount holder's
// socket (with the FUSE connection it belongs to); it is never written to a file, a command
// line, the environment or a log.
type Encryption struct {
	// Passphrase is the LUKS passphrase, or with Wrapped the key-encryption key of the DEK the
	// image's metadata keeps (kms.MetadataDEKKey).
	Passphrase []byte `json:"passphrase"`
	Wrapped    bool   `json:"wrapped,omitempty"`
	// VolumeID salts the wrapped DEK (kms.Wrap).
	VolumeID string `json:"volumeID,omitempty"`
}

// String keeps the passphrase out of anything that formats an Encryption.
func (e Encryption) String() string {
	return fmt.Sprintf("{wrapped:%v volumeID:%s passphrase:[redacted]}", e.Wrapped, e.VolumeID)
}

// GoString is String, for %#v.
func (e Encryption) GoString() string { return e.String() }

// ErrWrongKey: the key given does not open the image (a wrong encryptionPassphrase).
var ErrWrongKey = errors.New("wrong encryption key")

// ErrNoKey: the image is encrypted and no key came with the request, or a key came for an image
// that is not encrypted. Nothing serves an encrypted image as its ciphertext.
var ErrNoKey = errors.New("encryption key and image disagree")

// loadEncryption makes img read and write plaintext with enc's key. An image without
// kms.StateKey is plain and needs enc nil; one with it needs enc.
func loadEncryption(ctx context.Context, img *rbd.Image, spec string, enc *Encryption) error {
	v, err := img.GetMetadata(kms.StateKey)
	if ceph.Is(err, ceph.ErrNotFound) {
		if enc != nil {
			return fmt.Errorf("%w: image %s is not encrypted by monoceph (no %s metadata), but the volume says it is", ErrNoKey, spec, kms.StateKey)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the encryption state of image %s: %w", spec, err)
	}
	if enc == nil {
		return fmt.Errorf("%w: image %s is encrypted and no key came with the request (the next NodeStageVolume, with its secrets, opens it)", ErrNoKey, spec)
	}
	if _, err := kms.ParseImageState(v); err != nil {
		return err
	}
	pass := enc.Passphrase
	if enc.Wrapped {
		w, err := img.GetMetadata(kms.MetadataDEKKey)
		if err != nil {
			return fmt.Errorf("reading the wrapped key of image %s (%s): %w", spec, kms.MetadataDEKKey, err)
		}
		if pass, err = kms.Unwrap(enc.Passphrase, enc.VolumeID, w); err != nil {
			if errors.Is(err, kms.ErrWrongPassphrase) {
				return fmt.Errorf("%w: the passphrase (encryptionPassphrase of the node-stage secret) does not unwrap the key of image %s", ErrWrongKey, spec)
			}
			return fmt.Errorf("image %s: %w", spec, err)
		}
		defer clear(pass) // the unwrapped DEK, once librbd has it
	}
	// a KDF slot: argon2id takes up to 1 GiB and ~2 s per load
	err = kms.WithKDFSlot(ctx, func() error {
		return img.EncryptionLoad(rbd.EncryptionOptionsLUKS2{Alg: rbd.EncryptionAlgorithmAES256, Passphrase: pass})
	})
	if isErrno(err, syscall.EPERM) {
		return fmt.Errorf("%w: the passphrase does not open the LUKS header of image %s", ErrWrongKey, spec)
	}
	if err != nil {
		return fmt.Errorf("loading the encryption of image %s: %w", spec, err)
	}
	return nil
}

// isErrno reports whether err is a go-ceph error of errno e.
func isErrno(err error, e syscall.Errno) bool {
	var rerr interface{ ErrorCode() int }
	return errors.As(err, &rerr) && rerr.ErrorCode() == -int(e)
}
