package snapmeta

import (
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/kms"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWindowToVolume: the image's extents of an encrypted volume (16 MiB of LUKS header, then
// 32 MiB of volume) in the volume's coordinates; a plain volume's pass unchanged.
func TestWindowToVolume(t *testing.T) {
	const (
		mib = int64(1) << 20
		hdr = 16 * mib
		vol = 32 * mib
	)
	enc := window{header: hdr, size: vol}
	plain := window{size: vol}
	for _, tc := range []struct {
		name        string
		w           window
		off, length int64
		want        Extent
		ok          bool
	}{
		{"entirely in the header", enc, 0, 4096, Extent{}, false},
		{"the whole header", enc, 0, hdr, Extent{}, false},
		{"ends at the header's end", enc, hdr - 4096, 4096, Extent{}, false},
		{"straddles the header's end", enc, hdr - 4096, 8192, Extent{0, 4096}, true},
		{"header and all the volume", enc, 0, hdr + vol, Extent{0, vol}, true},
		{"first volume block", enc, hdr, 4096, Extent{0, 4096}, true},
		{"inside the volume", enc, hdr + 5*mib + 512, 1000, Extent{5*mib + 512, 1000}, true},
		{"last volume block", enc, hdr + vol - 4096, 4096, Extent{vol - 4096, 4096}, true},
		{"straddles the volume's end", enc, hdr + vol - 4096, 8192, Extent{vol - 4096, 4096}, true},
		{"past the volume's end", enc, hdr + vol, 4096, Extent{}, false},
		{"empty", enc, hdr + mib, 0, Extent{}, false},
		{"plain: first block", plain, 0, 4096, Extent{0, 4096}, true},
		{"plain: last block", plain, vol - 4096, 4096, Extent{vol - 4096, 4096}, true},
		{"plain: past the end", plain, vol, 4096, Extent{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, n, ok := tc.w.toVolume(tc.off, tc.length)
			if got := (Extent{off, n}); ok != tc.ok || ok && got != tc.want {
				t.Errorf("toVolume(%d, %d) = %v, %v; want %v, %v", tc.off, tc.length, got, ok, tc.want, tc.ok)
			}
		})
	}
	if got := enc.raw(4096); got != hdr+4096 {
		t.Errorf("raw(4096) = %d, want %d", got, hdr+4096)
	}
}

// TestWindowOf: the window an image's metadata gives. monoceph's state must name a header of
// whole 4 KiB blocks (else INTERNAL naming the image and the value, not raw offsets); an image
// ceph-csi encrypted with dm-crypt, under either of its keys, is FAILED_PRECONDITION; one it
// only prepared for encryption (no header yet) is plain.
func TestWindowOf(t *testing.T) {
	const (
		mib  = uint64(1) << 20
		raw  = 48 * mib
		name = "csi-vol-1"
	)
	state := func(header uint64) string {
		return kms.ImageState{Format: kms.FormatLUKS2, HeaderBytes: header, VolumeID: "v"}.String()
	}
	for _, tc := range []struct {
		name string
		md   map[string]string
		want window
		code codes.Code
		msg  []string // in the error
	}{
		{"plain", nil, window{size: int64(raw)}, codes.OK, nil},
		{"monoceph encrypted", map[string]string{kms.StateKey: state(16 * mib)}, window{header: int64(16 * mib), size: int64(32 * mib)}, codes.OK, nil},
		{"header 0", map[string]string{kms.StateKey: state(0)}, window{}, codes.Internal, []string{name, "headerBytes 0"}},
		{"header not of 4 KiB blocks", map[string]string{kms.StateKey: state(16*mib + 512)}, window{}, codes.Internal, []string{name, "headerBytes 16777728"}},
		{"header the whole image", map[string]string{kms.StateKey: state(raw)}, window{}, codes.Internal, []string{name}},
		{"ceph-csi encrypted", map[string]string{"rbd.csi.ceph.com/encrypted": "encrypted"}, window{}, codes.FailedPrecondition, []string{name, "ceph-csi", "LUKS header"}},
		{"ceph-csi encrypted, legacy key", map[string]string{".rbd.csi.ceph.com/encrypted": "encrypted"}, window{}, codes.FailedPrecondition, []string{name, "ceph-csi"}},
		{"ceph-csi only prepared", map[string]string{"rbd.csi.ceph.com/encrypted": "encryptionPrepared"}, window{size: int64(raw)}, codes.OK, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			get := func(k string) (string, bool, error) { v, ok := tc.md[k]; return v, ok, nil }
			w, err := windowOf(name, get, raw)
			if status.Code(err) != tc.code {
				t.Fatalf("windowOf = %+v, %v; want code %v", w, err, tc.code)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not name %q", err, m)
				}
			}
			if err == nil && w != tc.want {
				t.Errorf("windowOf = %+v, want %+v", w, tc.want)
			}
		})
	}
}
