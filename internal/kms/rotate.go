package kms

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/monoceph/monoceph/internal/faultpoint"
)

// Key rotation replaces a volume's DEK (the passphrase of its LUKS key slot) with a new random
// one; the data is not re-encrypted (the LUKS volume key stays, only the slot wrapping it
// changes). Every step is recorded before the next one starts, so a rotation killed anywhere
// leaves a header that opens with the DEK the KMS holds, and the next call finishes it:
//
//  0. the new DEK is recorded as pending, wrapped as the provider wraps the DEK (a pending one
//     found is reused: a retry finishes the rotation it interrupted instead of starting another;
//     one the KMS holds already, a rotation done but for dropping its record, is dropped);
//  1. a key slot is added for it, unless it opens the header already;
//  2. the KMS is made to hold it as the volume's DEK;
//  3. every other key slot is destroyed;
//  4. the pending record is dropped.
//
// Until step 2 the KMS holds the old DEK, whose slot is still there; from step 2 on, the new
// one, whose slot was written in step 1.

// PendingDEKKey is the image metadata key of the DEK a rotation is putting in place, wrapped
// as MetadataDEKKey's value is (the metadata and vaulttransit providers).
const PendingDEKKey = "monoceph.encryption.pending"

// pendingSuffix names the Vault KV secret of a pending DEK: <volume ID>.pending (vaulttokens).
const pendingSuffix = ".pending"

// Fault points between the steps (package faultpoint).
const (
	FaultPending   = "kms.Rotate.pending"
	FaultSlotAdded = "kms.Rotate.slot-added"
	FaultCommitted = "kms.Rotate.committed"
	FaultDestroyed = "kms.Rotate.slots-destroyed"
)

// ErrDefaultRotation: the default provider's key is the class's passphrase, which only the
// operator can change (in the class's Secret).
var ErrDefaultRotation = errors.New("the volume's key is the class's " + PassphraseKey +
	" (the default provider): rotate it by changing the Secret, monoceph cannot")

// ErrStaleKey: neither the DEK the KMS holds nor a pending one opens the header.
var ErrStaleKey = errors.New("the DEK the KMS holds does not open the volume's LUKS header")

// KeyStore is where a volume's DEK and a rotation's pending DEK are kept.
type KeyStore interface {
	// Current is the DEK the KMS holds for the volume.
	Current(ctx context.Context) ([]byte, error)
	// Pending is the pending DEK, nil without one.
	Pending(ctx context.Context) ([]byte, error)
	SetPending(ctx context.Context, dek []byte) error
	// Commit makes dek, the pending DEK, the volume's.
	Commit(ctx context.Context, dek []byte) error
	// DropPending removes the pending record; none is no error.
	DropPending(ctx context.Context) error
}

// KeySlots is a volume's LUKS header. Add and Destroy have reached the image when they return.
type KeySlots interface {
	// Unlock returns the slot key opens, ErrWrongKey when none does.
	Unlock(key []byte) (int, error)
	// Add adds a slot for key, unlocking the volume key with old.
	Add(old, key []byte) (int, error)
	Slots() []int
	Destroy(slot int) error
}

// ErrWrongKey is what KeySlots.Unlock answers for a key that opens no slot.
var ErrWrongKey = errors.New("the key opens no key slot")

// Guard is what KeySlots may implement to stop a rotation between its steps: Rotate asks it
// once the pending DEK is recorded and again right before it commits it (the pending DEK is
// never committed yet then: one the KMS holds already starts a fresh rotation). An error wrapping ErrRefused refuses the rotation: Rotate drops
// the pending record (the KMS still holds the DEK it held) and answers it; any other error
// stops the rotation with the record kept, for a retry to finish.
type Guard interface {
	Check(ctx context.Context, step string) error
}

// The steps Guard.Check is asked at.
const (
	StepPending = "pending"
	StepCommit  = "commit"
)

// ErrRefused: the rotation cannot go on (Guard), and was undone.
var ErrRefused = errors.New("the key rotation was refused")

// Rotate runs a rotation, or finishes one a killed call left pending. Once ctx ends it stops
// before its next step, as a killed call would, and returns ctx's error.
func Rotate(ctx context.Context, ks KeyStore, h KeySlots) error {
	cur, err := ks.Current(ctx)
	if err != nil {
		return fmt.Errorf("reading the volume's DEK: %w", err)
	}
	defer clear(cur)
	next, slot, err := pendingDEK(ctx, ks, h, cur)
	if err != nil {
		return err
	}
	defer clear(next)
	faultpoint.Hit(FaultPending)
	if err := check(ctx, ks, h, StepPending); err != nil {
		return err
	}

	if err := ctx.Err(); err != nil {
		return err
	}
	if slot < 0 {
		// a fresh pending DEK, or one whose slot a killed call did not finish writing
		if slot, err = h.Add(cur, next); errors.Is(err, ErrWrongKey) {
			return ErrStaleKey
		} else if err != nil {
			return fmt.Errorf("adding a key slot: %w", err)
		}
	}
	faultpoint.Hit(FaultSlotAdded)

	if err := ctx.Err(); err != nil {
		return err
	}
	if err := check(ctx, ks, h, StepCommit); err != nil {
		return err
	}
	if err := ks.Commit(ctx, next); err != nil {
		return fmt.Errorf("storing the new DEK: %w", err)
	}
	faultpoint.Hit(FaultCommitted)

	for _, s := range h.Slots() {
		if s != slot {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := h.Destroy(s); err != nil {
				return err
			}
		}
	}
	faultpoint.Hit(FaultDestroyed)

	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ks.DropPending(ctx); err != nil {
		return fmt.Errorf("dropping the pending DEK: %w", err)
	}
	return nil
}

// pendingDEK is the DEK the rotation moves to, recorded as pending: the one a killed call
// left, with the key slot it opens (-1: none yet), or a fresh one.
func pendingDEK(ctx context.Context, ks KeyStore, h KeySlots, cur []byte) (next []byte, slot int, err error) {
	if next, err = ks.Pending(ctx); err != nil {
		return nil, -1, fmt.Errorf("reading the pending DEK: %w", err)
	}
	if next != nil && bytes.Equal(next, cur) {
		// committed by a call that did not get to drop the record (killed, or DropPending
		// failed): that rotation is done but for its record, and finishing it here would
		// make this call a silent no-op; the rotation with the fresh DEK below destroys the slots it left
		clear(next)
		next = nil
		if err := ks.DropPending(ctx); err != nil {
			return nil, -1, fmt.Errorf("dropping the pending DEK of a committed rotation: %w", err)
		}
	}
	if next == nil {
		if next, err = NewDEK(); err != nil {
			return nil, -1, err
		}
		if err := ks.SetPending(ctx, next); err != nil {
			clear(next)
			return nil, -1, fmt.Errorf("recording the pending DEK: %w", err)
		}
		return next, -1, nil
	}
	if slot, err = h.Unlock(next); errors.Is(err, ErrWrongKey) {
		return next, -1, nil
	} else if err != nil {
		clear(next)
		return nil, -1, err
	}
	return next, slot, nil
}

// check asks h's Guard, if it has one, whether the rotation may take its next step; a refusal
// drops the pending record.
func check(ctx context.Context, ks KeyStore, h KeySlots, step string) error {
	g, ok := h.(Guard)
	if !ok {
		return nil
	}
	err := g.Check(ctx, step)
	if errors.Is(err, ErrRefused) {
		if derr := ks.DropPending(ctx); derr != nil {
			return fmt.Errorf("%w (dropping its pending DEK failed: %v)", err, derr)
		}
	}
	return err
}

// ImageMetadata is the metadata of a volume's image.
type ImageMetadata interface {
	// Get answers ErrNoMetadata for a key that is not there.
	Get(key string) (string, error)
	Set(key, value string) error
	// Remove of a key that is not there is no error.
	Remove(key string) error
}

// ErrNoMetadata: the image has no such metadata key.
var ErrNoMetadata = errors.New("no such image metadata")

// KeyStore returns the key store of a volume of KMS kmsID (ErrDefaultRotation for the default
// provider): its metadata, the class's secrets (the passphrase that wraps the DEK, the Vault
// token) and the volume ID (the wrapping's salt, the KV secret's name).
func (c *Config) KeyStore(kmsID, volumeID string, secrets map[string]string, md ImageMetadata) (KeyStore, error) {
	typ, err := c.Provider(kmsID)
	if err != nil {
		return nil, err
	}
	switch typ {
	case TypeDefault:
		return nil, ErrDefaultRotation
	case TypeMetadata:
		pass, err := Passphrase(secrets)
		if err != nil {
			return nil, err
		}
		return &metadataStore{md: md, volumeID: volumeID, pass: pass}, nil
	}
	v, err := c.Vault(kmsID, secrets)
	if err != nil {
		return nil, err
	}
	if v.Type() == TypeVaultTransit {
		return &transitStore{md: md, v: v, volumeID: volumeID}, nil
	}
	return &kvStore{v: v, volumeID: volumeID}, nil
}

// metadataStore: the DEK wrapped by the passphrase in the image's metadata (TypeMetadata).
type metadataStore struct {
	md       ImageMetadata
	volumeID string
	pass     []byte
}

func (m *metadataStore) open(key string) ([]byte, error) {
	w, err := m.md.Get(key)
	if err != nil {
		return nil, err
	}
	return Unwrap(m.pass, m.volumeID, w)
}

func (m *metadataStore) Current(context.Context) ([]byte, error) { return m.open(MetadataDEKKey) }

// Pending ignores a record the passphrase does not unwrap for this volume (Current did): a
// clone inherits its source's metadata, and with it a rotation the source left pending.
func (m *metadataStore) Pending(context.Context) ([]byte, error) {
	dek, err := m.open(PendingDEKKey)
	if errors.Is(err, ErrNoMetadata) || errors.Is(err, ErrWrongPassphrase) {
		return nil, nil
	}
	return dek, err
}

func (m *metadataStore) SetPending(_ context.Context, dek []byte) error {
	w, err := Wrap(m.pass, m.volumeID, dek)
	if err != nil {
		return err
	}
	return m.md.Set(PendingDEKKey, w)
}

// Commit copies the pending record: it is dek wrapped as the volume's DEK is.
func (m *metadataStore) Commit(context.Context, []byte) error { return copyPending(m.md) }

func (m *metadataStore) DropPending(context.Context) error { return m.md.Remove(PendingDEKKey) }

func copyPending(md ImageMetadata) error {
	w, err := md.Get(PendingDEKKey)
	if err != nil {
		return err
	}
	return md.Set(MetadataDEKKey, w)
}

// transitStore: the DEK encrypted by a Vault transit key in the image's metadata. A transit
// ciphertext is bound to no volume, so the pending record is the ciphertext with the volume ID
// it is for (pendingRecord): a clone inherits its source's metadata, and must not finish (or
// commit) a rotation its source left pending.
type transitStore struct {
	md       ImageMetadata
	v        *Vault
	volumeID string
}

// pendingRecord is the value of PendingDEKKey of the vaulttransit provider.
type pendingRecord struct {
	VolumeID   string `json:"volumeID"`
	Ciphertext string `json:"ciphertext"`
}

func (s *transitStore) Current(ctx context.Context) ([]byte, error) {
	ct, err := s.md.Get(MetadataDEKKey)
	if err != nil {
		return nil, err
	}
	return s.v.Open(ctx, "", ct)
}

// pending is this volume's pending ciphertext, "" without one: a record of another volume (a
// clone's source), or of a version that did not bind it (then the rotation starts afresh, and
// its step 3 destroys a slot the record's rotation may have added), is none.
func (s *transitStore) pending() (string, error) {
	v, err := s.md.Get(PendingDEKKey)
	if errors.Is(err, ErrNoMetadata) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var rec pendingRecord
	if json.Unmarshal([]byte(v), &rec) != nil || rec.VolumeID != s.volumeID || rec.Ciphertext == "" {
		return "", nil
	}
	return rec.Ciphertext, nil
}

func (s *transitStore) Pending(ctx context.Context) ([]byte, error) {
	ct, err := s.pending()
	if ct == "" || err != nil {
		return nil, err
	}
	return s.v.Open(ctx, "", ct)
}

func (s *transitStore) SetPending(ctx context.Context, dek []byte) error {
	ct, err := s.v.Seal(ctx, "", dek)
	if err != nil {
		return err
	}
	b, err := json.Marshal(pendingRecord{VolumeID: s.volumeID, Ciphertext: ct})
	if err != nil {
		return err
	}
	return s.md.Set(PendingDEKKey, string(b))
}

// Commit stores the pending ciphertext as the DEK's (ceph-csi's format: the ciphertext alone).
func (s *transitStore) Commit(context.Context, []byte) error {
	ct, err := s.pending()
	if err != nil {
		return err
	}
	if ct == "" {
		return errors.New("the volume's pending DEK record is gone")
	}
	return s.md.Set(MetadataDEKKey, ct)
}

func (s *transitStore) DropPending(context.Context) error { return s.md.Remove(PendingDEKKey) }

// kvStore: the DEK in Vault's KV under the volume ID, the pending one under <volume ID>.pending
// (the token needs the same rights there).
type kvStore struct {
	v        *Vault
	volumeID string
}

func (s *kvStore) Current(ctx context.Context) ([]byte, error) { return s.v.Open(ctx, s.volumeID, "") }

func (s *kvStore) Pending(ctx context.Context) ([]byte, error) {
	dek, err := s.v.Open(ctx, s.volumeID+pendingSuffix, "")
	if errors.Is(err, ErrNoDEK) {
		return nil, nil
	}
	return dek, err
}

func (s *kvStore) SetPending(ctx context.Context, dek []byte) error {
	_, err := s.v.Seal(ctx, s.volumeID+pendingSuffix, dek)
	return err
}

func (s *kvStore) Commit(ctx context.Context, dek []byte) error {
	_, err := s.v.Seal(ctx, s.volumeID, dek)
	return err
}

func (s *kvStore) DropPending(ctx context.Context) error {
	return s.v.Remove(ctx, s.volumeID+pendingSuffix)
}
