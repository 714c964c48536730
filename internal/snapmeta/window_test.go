package snapmeta

import "testing"

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
