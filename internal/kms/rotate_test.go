package kms

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

var errKilled = errors.New("killed")

// fakeVolume is a KMS and a LUKS header in memory. Every change counts as one step; the step
// numbered killAt fails (the process died there, after the changes before it), and after
// every change the header must open with the DEK the KMS holds.
type fakeVolume struct {
	t       *testing.T
	current []byte
	pending []byte
	slots   map[int][]byte
	steps   int
	killAt  int // 0: never
	// cancelAt is the step after whose change cancel runs (the caller's deadline passed)
	cancelAt int
	cancel   func()
}

func (f *fakeVolume) step() error {
	f.steps++
	if f.steps == f.killAt {
		return errKilled
	}
	if f.steps == f.cancelAt {
		defer f.cancel()
	}
	return nil
}

// check: some slot opens with the KMS's DEK.
func (f *fakeVolume) check(after string) {
	f.t.Helper()
	for _, k := range f.slots {
		if bytes.Equal(k, f.current) {
			return
		}
	}
	f.t.Fatalf("after %s: no key slot opens with the KMS's DEK", after)
}

func (f *fakeVolume) Current(context.Context) ([]byte, error) { return bytes.Clone(f.current), nil }
func (f *fakeVolume) Pending(context.Context) ([]byte, error) { return bytes.Clone(f.pending), nil }

func (f *fakeVolume) SetPending(_ context.Context, dek []byte) error {
	if err := f.step(); err != nil {
		return err
	}
	f.pending = bytes.Clone(dek)
	return nil
}

func (f *fakeVolume) Commit(_ context.Context, dek []byte) error {
	if err := f.step(); err != nil {
		return err
	}
	f.current = bytes.Clone(dek)
	f.check("Commit")
	return nil
}

func (f *fakeVolume) DropPending(context.Context) error {
	if err := f.step(); err != nil {
		return err
	}
	f.pending = nil
	return nil
}

func (f *fakeVolume) Unlock(key []byte) (int, error) {
	for _, s := range f.Slots() {
		if bytes.Equal(f.slots[s], key) {
			return s, nil
		}
	}
	return -1, ErrWrongKey
}

func (f *fakeVolume) Add(old, key []byte) (int, error) {
	if _, err := f.Unlock(old); err != nil {
		return -1, err
	}
	if err := f.step(); err != nil {
		return -1, err
	}
	s := 0
	for f.slots[s] != nil {
		s++
	}
	f.slots[s] = bytes.Clone(key)
	f.check("Add")
	return s, nil
}

func (f *fakeVolume) Slots() []int { return slices.Sorted(maps.Keys(f.slots)) }

func (f *fakeVolume) Destroy(slot int) error {
	if err := f.step(); err != nil {
		return err
	}
	delete(f.slots, slot)
	f.check(fmt.Sprintf("Destroy(%d)", slot))
	return nil
}

func newFake(t *testing.T) *fakeVolume {
	return &fakeVolume{t: t, current: []byte("dek-0"), slots: map[int][]byte{0: []byte("dek-0")}}
}

// TestRotateKilledAtEveryStep: a rotation killed at any of its changes leaves a header that
// opens with the KMS's DEK, and the next call finishes that rotation (the DEK it ends with is
// the one recorded as pending before the kill) with one slot left.
func TestRotateKilledAtEveryStep(t *testing.T) {
	ctx := context.Background()
	// an uninterrupted rotation of a one-slot header: SetPending, Add, Commit, Destroy, DropPending
	const steps = 5
	for killAt := 1; killAt <= steps+1; killAt++ {
		t.Run(fmt.Sprintf("killed at step %d", killAt), func(t *testing.T) {
			f := newFake(t)
			f.killAt = killAt
			err := Rotate(ctx, f, f)
			if killAt > steps {
				if err != nil {
					t.Fatalf("uninterrupted rotation: %v", err)
				}
			} else if !errors.Is(err, errKilled) {
				t.Fatalf("Rotate = %v, want the kill", err)
			}
			f.check("the kill")
			pending := bytes.Clone(f.pending)
			if bytes.Equal(pending, f.current) {
				// committed before the kill: the retry rotates afresh (finishing would be a
				// no-op, which a rotation asked for much later must not be either)
				pending = nil
			}
			killedWith := bytes.Clone(f.current)
			f.killAt = 0
			if err := Rotate(ctx, f, f); err != nil {
				t.Fatalf("retry: %v", err)
			}
			switch {
			case bytes.Equal(f.current, []byte("dek-0")), bytes.Equal(f.current, killedWith):
				t.Fatal("the DEK did not change")
			case f.pending != nil:
				t.Fatal("a pending DEK is left")
			case len(f.slots) != 1:
				t.Fatalf("slots %v, want one", f.Slots())
			case pending != nil && !bytes.Equal(f.current, pending):
				t.Fatal("the retry did not finish the rotation that was pending")
			}
			f.check("the retry")
		})
	}
}

// TestRotateStopsAtDeadline: a rotation whose context ends during a step (a call that could
// not be cancelled returned late) makes no further change, answers the context's error, and
// the next call finishes it.
func TestRotateStopsAtDeadline(t *testing.T) {
	const steps = 5 // as in TestRotateKilledAtEveryStep
	for cancelAt := 1; cancelAt <= steps-1; cancelAt++ {
		t.Run(fmt.Sprintf("deadline in step %d", cancelAt), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := newFake(t)
			f.cancelAt, f.cancel = cancelAt, cancel
			if err := Rotate(ctx, f, f); !errors.Is(err, context.Canceled) {
				t.Fatalf("Rotate = %v, want context.Canceled", err)
			}
			if f.steps != cancelAt {
				t.Fatalf("%d changes made, want %d: the rotation went on past its context", f.steps, cancelAt)
			}
			f.check("the deadline")
			f.cancelAt = 0
			if err := Rotate(context.Background(), f, f); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if f.pending != nil || len(f.slots) != 1 || bytes.Equal(f.current, []byte("dek-0")) {
				t.Fatalf("the retry did not finish the rotation: pending %q, slots %v", f.pending, f.Slots())
			}
		})
	}
}

// TestRotateStaleKey: a KMS whose DEK opens nothing is refused before the header changes.
func TestRotateStaleKey(t *testing.T) {
	f := newFake(t)
	f.current = []byte("lost")
	if err := Rotate(context.Background(), f, f); !errors.Is(err, ErrStaleKey) {
		t.Fatalf("Rotate = %v, want ErrStaleKey", err)
	}
	if len(f.slots) != 1 || !bytes.Equal(f.slots[0], []byte("dek-0")) {
		t.Fatalf("slots changed: %v", f.slots)
	}
}

type memMetadata map[string]string

func (m memMetadata) Get(k string) (string, error) {
	v, ok := m[k]
	if !ok {
		return "", ErrNoMetadata
	}
	return v, nil
}
func (m memMetadata) Set(k, v string) error { m[k] = v; return nil }
func (m memMetadata) Remove(k string) error { delete(m, k); return nil }

func TestKeyStore(t *testing.T) {
	cfg, err := Parse([]byte(`{"meta":{"encryptionKMSType":"metadata"}}`))
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{PassphraseKey: "kek"}
	if _, err := cfg.KeyStore("", "vol", secrets, memMetadata{}); !errors.Is(err, ErrDefaultRotation) {
		t.Fatalf("default provider: %v, want ErrDefaultRotation", err)
	}
	if _, err := cfg.KeyStore("gone", "vol", secrets, memMetadata{}); !errors.Is(err, ErrUnknownKMS) {
		t.Fatalf("unknown KMS: %v, want ErrUnknownKMS", err)
	}
	if _, err := cfg.KeyStore("meta", "vol", nil, memMetadata{}); !errors.Is(err, ErrMissingPassphrase) {
		t.Fatalf("no passphrase: %v, want ErrMissingPassphrase", err)
	}
	md := memMetadata{}
	w, err := Wrap([]byte("kek"), "vol", []byte("dek-0"))
	if err != nil {
		t.Fatal(err)
	}
	md[MetadataDEKKey] = w
	ks, err := cfg.KeyStore("meta", "vol", secrets, md)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if p, err := ks.Pending(ctx); p != nil || err != nil {
		t.Fatalf("Pending = %q, %v; want none", p, err)
	}
	if err := ks.SetPending(ctx, []byte("dek-1")); err != nil {
		t.Fatal(err)
	}
	if v := md[PendingDEKKey]; bytes.Contains([]byte(v), []byte("dek-1")) {
		t.Fatal("the pending DEK is in the metadata in the clear")
	}
	if p, err := ks.Pending(ctx); string(p) != "dek-1" || err != nil {
		t.Fatalf("Pending = %q, %v; want dek-1", p, err)
	}
	if c, err := ks.Current(ctx); string(c) != "dek-0" || err != nil {
		t.Fatalf("Current = %q, %v; want dek-0", c, err)
	}
	if err := ks.Commit(ctx, []byte("dek-1")); err != nil {
		t.Fatal(err)
	}
	if c, err := ks.Current(ctx); string(c) != "dek-1" || err != nil {
		t.Fatalf("Current after Commit = %q, %v; want dek-1", c, err)
	}
	if err := ks.DropPending(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := md[PendingDEKKey]; ok {
		t.Fatal("DropPending left the record")
	}
	// the wrapping is bound to the volume: another volume's store does not open it
	other, _ := cfg.KeyStore("meta", "other", secrets, md)
	if _, err := other.Current(ctx); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("another volume's store: %v, want ErrWrongPassphrase", err)
	}
	// a pending record a clone inherited from its source is not the clone's
	if err := ks.SetPending(ctx, []byte("dek-2")); err != nil {
		t.Fatal(err)
	}
	if p, err := other.Pending(ctx); p != nil || err != nil {
		t.Fatalf("another volume's pending record: %q, %v; want none", p, err)
	}
}

// guardedFake is a fakeVolume whose Guard answers err at step at.
type guardedFake struct {
	*fakeVolume
	at  string
	err error
}

func (g *guardedFake) Check(_ context.Context, step string) error {
	if step == g.at {
		return g.err
	}
	return nil
}

// TestRotateGuard: a Guard's refusal stops the rotation before the KMS holds the new DEK and
// drops the pending record; another error (a lost lease) stops it with the record kept, and
// the retry finishes that rotation.
func TestRotateGuard(t *testing.T) {
	errLost := errors.New("lease lost")
	for _, tt := range []struct {
		at          string
		err         error
		keepPending bool
	}{
		{StepPending, ErrRefused, false},
		{StepCommit, ErrRefused, false},
		{StepPending, errLost, true},
		{StepCommit, errLost, true},
	} {
		t.Run(tt.at+" "+tt.err.Error(), func(t *testing.T) {
			ctx := context.Background()
			g := &guardedFake{fakeVolume: newFake(t), at: tt.at, err: tt.err}
			if err := Rotate(ctx, g, g); !errors.Is(err, tt.err) {
				t.Fatalf("Rotate = %v, want %v", err, tt.err)
			}
			if !bytes.Equal(g.current, []byte("dek-0")) {
				t.Fatal("the KMS holds a new DEK after the guard stopped the rotation")
			}
			if (g.pending != nil) != tt.keepPending {
				t.Fatalf("pending record %q, want kept: %v", g.pending, tt.keepPending)
			}
			pending := bytes.Clone(g.pending)
			g.err = nil
			if err := Rotate(ctx, g, g); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if len(g.slots) != 1 || g.pending != nil || bytes.Equal(g.current, []byte("dek-0")) {
				t.Fatalf("retry: DEK %q, pending %q, slots %v", g.current, g.pending, g.Slots())
			}
			if pending != nil && !bytes.Equal(g.current, pending) {
				t.Fatal("the retry did not finish the rotation the guard stopped")
			}
		})
	}
}

// TestRotateAfterFailedDrop: a committed rotation whose record was not dropped does not make
// the next rotation a no-op.
func TestRotateAfterFailedDrop(t *testing.T) {
	f := newFake(t)
	f.current, f.pending = []byte("dek-1"), []byte("dek-1")
	f.slots = map[int][]byte{0: []byte("dek-1")}
	if err := Rotate(context.Background(), f, f); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(f.current, []byte("dek-1")) || f.pending != nil || len(f.slots) != 1 {
		t.Fatalf("DEK %q, pending %q, slots %v: want a new DEK, no record, one slot", f.current, f.pending, f.Slots())
	}
}

// fakeTransit is a Vault transit engine whose ciphertext is the plaintext, base64.
func fakeTransit(t *testing.T) *Vault {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]string
		_ = json.NewDecoder(r.Body).Decode(&in)
		var out string
		switch {
		case strings.Contains(r.URL.Path, "/encrypt/"):
			out = fmt.Sprintf(`{"data": {"ciphertext": "vault:v1:%s"}}`, in["plaintext"])
		case strings.Contains(r.URL.Path, "/decrypt/"):
			out = fmt.Sprintf(`{"data": {"plaintext": %q}}`, strings.TrimPrefix(in["ciphertext"], "vault:v1:"))
		default:
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	return vaultAt(t, srv.URL, "s.token", true)
}

// TestTransitPendingIsBound: the vaulttransit provider's pending record names its volume; a
// clone's store ignores the record it inherited from its source, whose rotation it must
// neither finish nor commit.
func TestTransitPendingIsBound(t *testing.T) {
	ctx := context.Background()
	v := fakeTransit(t)
	md := memMetadata{}
	ct, err := v.Seal(ctx, "", []byte("dek-0"))
	if err != nil {
		t.Fatal(err)
	}
	md[MetadataDEKKey] = ct
	src := &transitStore{md: md, v: v, volumeID: "src"}
	if err := src.SetPending(ctx, []byte("dek-1")); err != nil {
		t.Fatal(err)
	}
	if p, err := src.Pending(ctx); string(p) != "dek-1" || err != nil {
		t.Fatalf("the source's Pending = %q, %v; want dek-1", p, err)
	}
	clone := &transitStore{md: maps.Clone(md), v: v, volumeID: "clone"}
	if p, err := clone.Pending(ctx); p != nil || err != nil {
		t.Fatalf("the clone's Pending = %q, %v; want none (its source's record)", p, err)
	}
	if err := clone.Commit(ctx, nil); err == nil {
		t.Fatal("the clone committed its source's pending DEK")
	}
	if err := src.Commit(ctx, []byte("dek-1")); err != nil {
		t.Fatal(err)
	}
	if c, err := src.Current(ctx); string(c) != "dek-1" || err != nil {
		t.Fatalf("Current after Commit = %q, %v; want dek-1", c, err)
	}
	if !strings.HasPrefix(md[MetadataDEKKey], "vault:v1:") {
		t.Fatalf("the committed DEK %q is not a bare transit ciphertext (ceph-csi's format)", md[MetadataDEKKey])
	}
	// a record of a version that did not bind it is nobody's
	md[PendingDEKKey] = ct
	if p, err := src.Pending(ctx); p != nil || err != nil {
		t.Fatalf("an unbound record: Pending = %q, %v; want none", p, err)
	}
}
