package rbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/radosop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// classKey is the key material of an encrypted class for one CreateVolume: the provider of its
// encryptionKMSID and the provisioner secret's encryptionPassphrase, or the Vault the provider
// keeps the DEK in (with the secret's token). Never logged or stored.
type classKey struct {
	kmsID string
	typ   string
	pass  []byte
	vault *kms.Vault
}

// String keeps the passphrase out of anything that prints a classKey (%v, %+v, a logger).
func (k classKey) String() string {
	return fmt.Sprintf("{kmsID:%q type:%q pass:<redacted>}", k.kmsID, k.typ)
}

// GoString is String for %#v.
func (k classKey) GoString() string { return k.String() }

// classEncryption checks an encrypted class's KMS and secret before anything is reserved;
// nil for a class without encryption. A Vault provider is asked here whether it is unsealed and
// takes the secret's token: a KMS that cannot keep the DEK fails the call before any image,
// journal record or reservation exists.
func (c *Controller) classEncryption(ctx context.Context, params volumeParams, secrets map[string]string) (*classKey, error) {
	if !params.Encrypted {
		return nil, nil
	}
	typ, err := c.opts.KMS.Provider(params.KMSID)
	if err != nil {
		return nil, classparam.InvalidParam(paramKMSID, "%v", err)
	}
	if typ == kms.TypeVaultTokens || typ == kms.TypeVaultTransit {
		v, err := c.opts.KMS.Vault(params.KMSID, secrets)
		if errors.Is(err, kms.ErrConfig) {
			return nil, kmsStatus(params.KMSID, err)
		}
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "the class is encrypted with KMS %q and its provisioner secret: %v", params.KMSID, err)
		}
		if err := v.Check(ctx); err != nil {
			return nil, kmsStatus(params.KMSID, err)
		}
		return &classKey{kmsID: params.KMSID, typ: typ, vault: v}, nil
	}
	pass, err := kms.Passphrase(secrets)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the class is encrypted (parameters[%q]) and its provisioner secret has no %s: %v", paramEncrypted, kms.PassphraseKey, err)
	}
	return &classKey{kmsID: params.KMSID, typ: typ, pass: pass}, nil
}

// kmsStatus is the gRPC status of a KMS error: UNAVAILABLE for a KMS that is down or sealed
// (the CO retries), PERMISSION_DENIED for a token it refuses, FAILED_PRECONDITION for a KMS
// entry (or driver environment) the operator must fix, INVALID_ARGUMENT for an entry naming
// what the KMS lacks, INTERNAL otherwise (a volume
// whose DEK is missing has lost its key: no retry brings it back).
func kmsStatus(kmsID string, err error) error {
	switch {
	case errors.Is(err, kms.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "KMS %q: %v", kmsID, err)
	case errors.Is(err, kms.ErrDenied):
		return status.Errorf(codes.PermissionDenied, "KMS %q (the token of the class's secrets): %v", kmsID, err)
	case errors.Is(err, kms.ErrConfig):
		return status.Errorf(codes.FailedPrecondition, "KMS %q: %v", kmsID, err)
	case errors.Is(err, kms.ErrInvalid):
		return status.Errorf(codes.InvalidArgument, "KMS %q: %v", kmsID, err)
	}
	return status.Errorf(codes.Internal, "KMS %q: %v", kmsID, err)
}

// readEncryption returns the encryption state of an image (kms.StateKey), nil for a plain one.
func readEncryption(img *rbd.Image) (*kms.ImageState, error) {
	v, err := img.GetMetadata(kms.StateKey)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := kms.ParseImageState(v)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &st, nil
}

// imageEncryption is readEncryption of image name at p.
func imageEncryption(ctx context.Context, p radosop.Location, name string) (*kms.ImageState, error) {
	return radosop.With(ctx, p, "read the encryption of "+name, func(io *rados.IOContext) (*kms.ImageState, error) {
		img, err := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
		if err != nil {
			return nil, err
		}
		defer img.Close()
		return readEncryption(img)
	})
}

// sourceEncryption checks that a content source and the class agree about encryption: a plain
// source cannot become an encrypted volume (its data would have to be encrypted), an encrypted
// one cannot become a plain volume (its pods would read ciphertext) or move to another KMS (the
// key of a Pacific clone is its parent's). It returns the source's state, nil for a plain one.
func sourceEncryption(ctx context.Context, o origin, key *classKey) (*kms.ImageState, error) {
	if o.what == "" {
		return nil, nil
	}
	st, err := imageEncryption(ctx, o.loc, o.image)
	if isNotFound(err) && o.member == nil {
		return nil, controller.NotFoundf("%s does not exist", o.what)
	}
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	if o.member != nil {
		// a member's snapshot is reached by ID (restoreMember); its image's state says
		// whether the member is ciphertext
		switch {
		case key != nil:
			return nil, status.Errorf(codes.InvalidArgument, "restoring a group snapshot member into an encrypted class is not supported yet")
		case st != nil:
			return nil, status.Errorf(codes.InvalidArgument, "%s is a member of an encrypted volume (KMS %q): restoring it into an unencrypted class would give its pods ciphertext", o.what, st.KMSID)
		}
		return nil, nil
	}
	switch {
	case st == nil && key != nil:
		return nil, status.Errorf(codes.InvalidArgument, "%s is not encrypted, the class is (parameters[%q]): monoceph does not encrypt existing data", o.what, paramEncrypted)
	case st != nil && key == nil:
		return nil, status.Errorf(codes.InvalidArgument, "%s is encrypted (KMS %q); a volume made from it needs an encrypted class with the same encryptionKMSID", o.what, st.KMSID)
	case st != nil && st.KMSID != key.kmsID:
		return nil, status.Errorf(codes.InvalidArgument, "%s is encrypted with KMS %q, the class names %q: the copy keeps its source's key, so its KMS too", o.what, st.KMSID, key.kmsID)
	}
	return st, nil
}

// ensureEncrypted finishes an encrypted volume's image: a new one gets its LUKS2 header (and
// with the metadata provider a random DEK, wrapped for this volume), then grows by the header so
// that the volume shows size bytes; a clone takes over the state it inherited from its source
// (the DEK is wrapped again for this volume: the salt is the volume ID). The state is written
// last and names the volume, so a retry after a crash redoes whatever it does not show done;
// nothing is handed out before it is there.
func ensureEncrypted(ctx context.Context, p radosop.Location, name, volumeID string, size uint64, key *classKey) error {
	st, err := imageEncryption(ctx, p, name)
	if err != nil || (st != nil && st.VolumeID == volumeID) {
		return err
	}
	_, err = radosop.With(ctx, p, "encrypt "+name, func(io *rados.IOContext) (struct{}, error) {
		if st != nil {
			return struct{}{}, adoptEncryption(ctx, io, name, volumeID, size, *st, key)
		}
		return struct{}{}, formatEncryption(ctx, io, name, volumeID, size, key)
	})
	return err
}

// formatEncryption writes the LUKS2 header of a new image and its state.
func formatEncryption(ctx context.Context, io *rados.IOContext, name, volumeID string, size uint64, key *classKey) error {
	var header uint64
	err := withImage(io, name, func(img *rbd.Image) error {
		if err := checkUnwritten(img, name); err != nil {
			return err
		}
		pass := key.pass
		if key.typ != kms.TypeDefault {
			dek, err := kms.NewDEK()
			if err != nil {
				return err
			}
			defer clear(dek) // after the format below, which is the DEK's last use
			// the DEK is kept (in the KMS, or wrapped in the metadata) before the header is
			// written with it: a format without its key would be a volume nobody can open
			var w string
			if key.vault != nil {
				w, err = key.vault.Seal(ctx, volumeID, dek)
				if err != nil {
					return kmsStatus(key.kmsID, err)
				}
			} else if w, err = kms.Wrap(key.pass, volumeID, dek); err != nil {
				return err
			}
			if w != "" {
				if err := img.SetMetadata(kms.MetadataDEKKey, w); err != nil {
					return err
				}
			}
			pass = dek
		}
		// room for the header first: librbd refuses (ENOSPC) to format an image no larger
		// than the header, so a volume of 16 MiB or less could not be made otherwise
		if err := growTo(img, size+luks2HeaderBytes); err != nil {
			return err
		}
		raw, err := img.GetSize()
		if err != nil {
			return err
		}
		// a KDF slot: argon2id takes up to 1 GiB and ~2 s per format
		if err := kms.WithKDFSlot(ctx, func() error {
			return img.EncryptionFormat(rbd.EncryptionOptionsLUKS2{Alg: rbd.EncryptionAlgorithmAES256, Passphrase: pass})
		}); err != nil {
			return err
		}
		// the handle now reads through the encryption: its size is what the header leaves
		plain, err := img.GetSize()
		if err != nil {
			return err
		}
		if plain >= raw {
			return status.Errorf(codes.Internal, "image %s is %d bytes before its LUKS header and %d after", name, raw, plain)
		}
		header = raw - plain
		return nil
	})
	if err != nil {
		return err
	}
	// on a handle without the encryption loaded: there a resize is of the raw image on every
	// release (Pacific's librbd resizes the raw image on an encrypted handle too, newer ones
	// may not)
	return withImage(io, name, func(img *rbd.Image) error {
		if err := growTo(img, size+header); err != nil {
			return err
		}
		return img.SetMetadata(kms.StateKey, kms.ImageState{Format: kms.FormatLUKS2, KMSID: key.kmsID, HeaderBytes: header, VolumeID: volumeID}.String())
	})
}

// luks2HeaderBytes is where librbd's LUKS2 format puts the data (its header and keyslots
// area); the header actually written is measured after the format.
const luks2HeaderBytes = 16 << 20

// luksMagic starts every LUKS header (LUKS1 and LUKS2 alike).
var luksMagic = []byte("LUKS\xba\xbe")

// checkUnwritten refuses to format an image that holds data: only the volume's own LUKS header
// (a format cut short before its state was written) may be there. The journal already refuses
// an encrypted repeat of a plain volume; this keeps a header off any data whatever the cause.
func checkUnwritten(img *rbd.Image, name string) error {
	size, err := img.GetSize()
	if err != nil {
		return err
	}
	written := false
	err = img.DiffIterate(rbd.DiffIterateConfig{SnapName: rbd.NoSnapshot, Length: size, IncludeParent: rbd.IncludeParent, WholeObject: rbd.EnableWholeObject,
		Callback: func(uint64, uint64, int, interface{}) int {
			written = true
			return -1 // the first extent answers the question
		}})
	if err != nil && !written {
		return err
	}
	if !written {
		return nil
	}
	head := make([]byte, len(luksMagic))
	if _, err := img.ReadAt(head, 0); err != nil {
		return err
	}
	if bytes.Equal(head, luksMagic) {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "image %s holds data and no encryption state: formatting it would destroy the data", name)
}

// keyRotationAborts is ABORTED, with snapshot snap of img removed, when img is encrypted and
// a key rotation of it may be under way (kms.RotationUnderway): the snapshot would keep a
// header the rotation is changing, while what is restored or cloned from it takes the DEK
// record of its own time. Every snapshot of an encrypted image the controller cuts (a CSI
// snapshot, a clone's transient one, a group snapshot's members) is checked right after the
// cut and before it is acknowledged; the rotation checks for snapshots on its side. The
// sidecar retries an ABORTED call, and a rotation is done within minutes.
func keyRotationAborts(io *rados.IOContext, img *rbd.Image, remove func() error) error {
	enc, err := readEncryption(img)
	if err != nil || enc == nil {
		return err
	}
	busy, err := kms.RotationUnderway(io, img)
	if err == nil && !busy {
		return nil
	}
	if rerr := remove(); rerr != nil && !isNotFound(rerr) {
		return fmt.Errorf("removing a snapshot cut during a key rotation of the volume: %w", rerr)
	}
	if err != nil {
		return fmt.Errorf("checking for a key rotation of the volume: %w", err)
	}
	return status.Error(codes.Aborted, "a key rotation of the volume is under way (its lock is held, or a rotation is pending): a snapshot now could restore into a volume no key opens; the snapshot was removed, retry later")
}

// adoptEncryption makes the state a clone inherited from its source (librbd copies a parent's
// metadata to its clones) this volume's. On Pacific a clone opens with its parent's LUKS
// passphrase (librbd's per-clone keys, rbd_encryption_load2, came with Reef), so the DEK stays
// the source's, wrapped again for this volume.
func adoptEncryption(ctx context.Context, io *rados.IOContext, name, volumeID string, size uint64, st kms.ImageState, key *classKey) error {
	return withImage(io, name, func(img *rbd.Image) error {
		if key.typ == kms.TypeVaultTokens {
			// KV keys DEKs by volume ID: the clone gets a copy under its own, so that either
			// volume's delete leaves the other's key
			dek, err := key.vault.Open(ctx, st.VolumeID, "")
			if errors.Is(err, kms.ErrNoDEK) {
				// copied already, by a call killed before the state (or the source is gone)
				dek, err = key.vault.Open(ctx, volumeID, "")
			}
			if err != nil {
				return kmsStatus(key.kmsID, err)
			}
			_, err = key.vault.Seal(ctx, volumeID, dek)
			clear(dek)
			if err != nil {
				return kmsStatus(key.kmsID, err)
			}
		}
		// a transit ciphertext is bound to no volume: the inherited metadata opens as it is
		if key.typ == kms.TypeMetadata {
			w, err := img.GetMetadata(kms.MetadataDEKKey)
			if err != nil {
				return err
			}
			dek, err := kms.Unwrap(key.pass, st.VolumeID, w)
			if errors.Is(err, kms.ErrWrongPassphrase) {
				// wrapped for this volume already, by a call killed before the state
				dek, err = kms.Unwrap(key.pass, volumeID, w)
			}
			if errors.Is(err, kms.ErrWrongPassphrase) {
				return status.Errorf(codes.InvalidArgument, "the class's %s does not unwrap the key of the source volume %s", kms.PassphraseKey, st.VolumeID)
			}
			if err != nil {
				return err
			}
			w, err = kms.Wrap(key.pass, volumeID, dek)
			clear(dek)
			if err != nil {
				return err
			}
			if err := img.SetMetadata(kms.MetadataDEKKey, w); err != nil {
				return err
			}
		}
		// a rotation the source had pending when the clone was cut is the source's: the clone
		// must neither finish it nor look rotating to the snapshot check (keyRotationAborts)
		if err := img.RemoveMetadata(kms.PendingDEKKey); err != nil && !isNotFound(err) {
			return err
		}
		if err := growTo(img, size+st.HeaderBytes); err != nil {
			return err
		}
		st.VolumeID = volumeID
		return img.SetMetadata(kms.StateKey, st.String())
	})
}
