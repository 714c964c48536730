package luks

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

const headerBytes = 16 << 20 // LUKS2's default data offset, which librbd's format uses too

// formatted is a LUKS2 header made by cryptsetup (test only) with a fast PBKDF for its first
// slot, opened by key.
func formatted(t *testing.T, key string) []byte {
	t.Helper()
	if _, err := exec.LookPath("cryptsetup"); err != nil {
		t.Skip("cryptsetup makes the test's header: not installed")
	}
	file := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 2*headerBytes); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--key-file", "-", file)
	cmd.Stdin = bytes.NewReader([]byte(key))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v: %s", err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b[:headerBytes]
}

// TestRotateSlots walks a rotation on a header: a slot added for the new key, the old one
// destroyed, and the bytes that changed listed in the order they may reach an image.
func TestRotateSlots(t *testing.T) {
	orig := formatted(t, "old-key")
	h, err := Load(orig)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if s, err := h.Unlock([]byte("old-key")); err != nil || s != 0 {
		t.Fatalf("Unlock(old) = %d, %v; want slot 0", s, err)
	}
	if _, err := h.Unlock([]byte("new-key")); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Unlock(new) before Add: %v, want ErrWrongKey", err)
	}
	if _, err := h.Add([]byte("wrong"), []byte("new-key")); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("Add with a wrong key: %v, want ErrWrongKey", err)
	}
	slot, err := h.Add([]byte("old-key"), []byte("new-key"))
	if err != nil || slot == 0 {
		t.Fatalf("Add = %d, %v; want a new slot", slot, err)
	}
	added, err := h.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	ext, err := Changes(orig, added)
	if err != nil {
		t.Fatal(err)
	}
	hdr, _ := JSONCopyBytes(added)
	checkOrder(t, ext, hdr)
	if got := h.Slots(); !slices.Equal(got, []int{0, slot}) {
		t.Fatalf("slots %v, want [0 %d]", got, slot)
	}
	if err := h.Destroy(0); err != nil {
		t.Fatal(err)
	}
	if got := h.Slots(); !slices.Equal(got, []int{slot}) {
		t.Fatalf("slots after Destroy(0): %v, want [%d]", got, slot)
	}
	final, err := h.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	ext, err = Changes(added, final)
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, ext, hdr)

	// a fresh load of the result: what an image with these bytes opens with
	h2, err := Load(final)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	if _, err := h2.Unlock([]byte("old-key")); !errors.Is(err, ErrWrongKey) {
		t.Fatalf("old key after the rotation: %v, want ErrWrongKey", err)
	}
	if s, err := h2.Unlock([]byte("new-key")); err != nil || s != slot {
		t.Fatalf("new key after the rotation: slot %d, %v; want %d", s, err, slot)
	}
}

// checkOrder: areas past the JSON copies first, then the primary copy, then the secondary;
// both copies changed.
func checkOrder(t *testing.T, ext []Extent, hdr int) {
	t.Helper()
	region := func(e Extent) int {
		switch {
		case e.Off >= int64(2*hdr):
			return 0
		case e.Off < int64(hdr):
			if e.Off+int64(e.Len) > int64(hdr) {
				t.Fatalf("extent %+v spans both JSON copies", e)
			}
			return 1
		}
		return 2
	}
	last, seen := 0, map[int]bool{}
	for _, e := range ext {
		r := region(e)
		if r < last {
			t.Fatalf("extents %+v: region %d after %d", ext, r, last)
		}
		last, seen[r] = r, true
	}
	if !seen[1] || !seen[2] {
		t.Fatalf("extents %+v: both JSON copies must change", ext)
	}
}

func TestChanges(t *testing.T) {
	base := make([]byte, 64<<10)
	copy(base, magic)
	base[7] = 2
	base[14] = 0x40 // header size 16 KiB
	mod := func(offs ...int) []byte {
		b := bytes.Clone(base)
		for _, o := range offs {
			b[o] ^= 1
		}
		return b
	}
	for _, tt := range []struct {
		name string
		next []byte
		want []Extent
	}{
		{"nothing", base, nil},
		{"area then copies", mod(100, 20000, 40000, 45000), []Extent{{36864, 8192}, {0, 4096}, {16384, 4096}}},
		{"copies are not merged", mod(16383, 16384), []Extent{{12288, 4096}, {16384, 4096}}},
		// in each copy the JSON area before its binary header (seqid, checksum)
		{"JSON before binary header", mod(100, 5000, 9000, 20000, 21000, 40000),
			[]Extent{{36864, 4096}, {4096, 8192}, {0, 4096}, {20480, 4096}, {16384, 4096}}},
		{"binary header and JSON are not merged", mod(4095, 4096), []Extent{{4096, 4096}, {0, 4096}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Changes(base, tt.next)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Changes = %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := Changes(base, base[:4096]); err == nil {
		t.Fatal("Changes of different sizes: no error")
	}
	if _, err := JSONCopyBytes(make([]byte, 64<<10)); err == nil {
		t.Fatal("JSONCopyBytes of zeros: no error")
	}
}
