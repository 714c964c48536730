package snapmeta

import (
	"slices"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/kms"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEncryptedOffsets: the extents of an encrypted volume (librbd's LUKS2, laid out as
// CreateVolume lays it out) are the volume's: the LUKS header is not reported, offsets start at
// the volume's first byte, the capacity is the volume's size and starting_offset is checked
// against it. Each answer is checked against the blocks written through the decrypted image
// and against `rbd diff` of the raw image with the header cut off and the rest shifted down.
func TestEncryptedOffsets(t *testing.T) {
	const (
		kib = int64(1) << 10
		mib = kib << 10
		vol = 32 * mib
	)
	e := newEnv(t, Options{})
	// as CreateVolume does: room for the header first, format, then the measured header is
	// recorded in the image's metadata (one format: each runs argon2id for seconds)
	im := e.newImage(t, uint64(vol+16*mib))
	if err := im.img.EncryptionFormat(rbd.EncryptionOptionsLUKS2{Alg: rbd.EncryptionAlgorithmAES256, Passphrase: []byte("cbt-of-encrypted")}); err != nil {
		t.Fatal(err)
	}
	plain, err := im.img.GetSize() // the handle now reads through the encryption
	if err != nil {
		t.Fatal(err)
	}
	if int64(plain) != vol {
		t.Fatalf("the formatted image shows %d bytes, want the volume's %d (a header of 16 MiB)", plain, vol)
	}
	header := 16 * mib
	if err := im.img.SetMetadata(kms.StateKey, kms.ImageState{Format: kms.FormatLUKS2, HeaderBytes: uint64(header), VolumeID: im.id.String()}.String()); err != nil {
		t.Fatal(err)
	}

	// writes through the decrypted image, at the volume's offsets: its first block, a run
	// across an object boundary and its last block
	im.write(t, 0, 4*kib, 'a')
	im.write(t, 4*mib-8*kib, 64*kib, 'b')
	im.write(t, vol-4*kib, 4*kib, 'c')
	s1 := im.snap(t)
	im.write(t, 0, 4*kib, 'd')
	im.write(t, 9*mib, 8*kib, 'e')
	s2 := im.snap(t)

	// librbd's encryption fills an object's first write with encrypted zeros from the
	// object's start (a RADOS hole would decrypt to noise), so the image's extents cover the
	// blocks written rather than equal them
	wroteS1 := []Extent{{0, 4 * kib}, {4*mib - 8*kib, 64 * kib}, {vol - 4*kib, 4 * kib}}
	wroteDelta := []Extent{{0, 4 * kib}, {9 * mib, 8 * kib}}

	raw := e.oracle(t, s1, nil, false)
	if len(raw) == 0 || raw[0].Offset >= header {
		t.Fatalf("rbd diff of the raw image: %v, want the LUKS header's extents first", raw)
	}
	for _, c := range []struct {
		name   string
		run    func() (stream, error)
		start  int64
		oracle []Extent
		wrote  []Extent
	}{
		{"allocated", func() (stream, error) { return e.allocated(t, s1, 0, 0) }, 0, raw, wroteS1},
		{"allocated from 4 MiB", func() (stream, error) { return e.allocated(t, s1, 4*mib, 0) }, 4 * mib, raw, clip(wroteS1, 4*mib)},
		{"delta", func() (stream, error) { return e.delta(t, s1, s2, 0, 0) }, 0, e.oracle(t, s2, &s1, false), wroteDelta},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.run()
			if err != nil {
				t.Fatal(err)
			}
			checkWellFormed(t, s, vol, Variable, c.start, DefaultMaxResults)
			checkCovers(t, s.extents, c.wrote)
			if want := clip(inVolume(c.oracle, header, vol), c.start); !slices.Equal(s.extents, want) {
				t.Errorf("extents %v, want rbd diff without the header %v (raw %v)", s.extents, want, c.oracle)
			}
		})
	}

	t.Run("fixed", func(t *testing.T) {
		e.engine.opts.Style = Fixed // read per stream; no stream runs now
		defer func() { e.engine.opts.Style = Variable }()
		s, err := e.allocated(t, s1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkWellFormed(t, s, vol, Fixed, 0, DefaultMaxResults)
		if want := blocks(inVolume(raw, header, vol), im.objSize); !slices.Equal(s.extents, want) {
			t.Errorf("extents %v, want %v", s.extents, want)
		}
	})

	// a restore of an encrypted snapshot is a clone: it inherits the metadata and the header
	t.Run("clone", func(t *testing.T) {
		c := im.clone(t, s1)
		cs := c.snap(t)
		s, err := e.allocated(t, cs, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkWellFormed(t, s, vol, Variable, 0, DefaultMaxResults)
		if want := inVolume(raw, header, vol); !slices.Equal(s.extents, want) {
			t.Errorf("extents %v, want its parent's %v", s.extents, want)
		}
	})

	// the image is 16 MiB larger than the volume: an offset past the volume is out of range
	for _, start := range []int64{vol, vol + header - 4*kib} {
		if _, err := e.allocated(t, s1, start, 0); status.Code(err) != codes.OutOfRange {
			t.Errorf("allocated from %d of a %d-byte volume: %v, want OutOfRange", start, vol, err)
		}
		if _, err := e.delta(t, s1, s2, start, 0); status.Code(err) != codes.OutOfRange {
			t.Errorf("delta from %d of a %d-byte volume: %v, want OutOfRange", start, vol, err)
		}
	}
}

// inVolume is what of the raw image's extents lies in the volume [header, header+size),
// shifted to the volume's offsets.
func inVolume(raw []Extent, header, size int64) []Extent {
	var out []Extent
	for _, x := range raw {
		lo, hi := max(x.Offset, header), min(x.End(), header+size)
		if hi > lo {
			out = appendCoalesced(out, Extent{lo - header, hi - lo})
		}
	}
	return out
}

// checkCovers fails unless every extent written lies inside one of the extents reported.
func checkCovers(t testing.TB, got, wrote []Extent) {
	t.Helper()
	for _, w := range wrote {
		if !slices.ContainsFunc(got, func(x Extent) bool { return x.Offset <= w.Offset && w.End() <= x.End() }) {
			t.Errorf("extents %v do not cover the block written at %v", got, w)
		}
	}
}
