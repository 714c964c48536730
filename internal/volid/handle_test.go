package volid

import (
	"errors"
	"strings"
	"testing"
)

func TestParseHandle(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Handle
	}{
		// written by ceph-csi v3.12 on the local cluster (RBD volume, RBD snapshot, CephFS volume)
		{"0001-0002-c1-0000000000000002-c050fde3-2a93-4a45-900c-96bcc96c6b40", Handle{"c1", 2, "c050fde3-2a93-4a45-900c-96bcc96c6b40"}},
		{"0001-0002-c1-0000000000000002-abff65d2-5d98-487b-8791-09fe613148f8", Handle{"c1", 2, "abff65d2-5d98-487b-8791-09fe613148f8"}},
		{"0001-0002-c1-0000000000000001-1a5d59f0-efa1-4e4a-8f61-262da0ad9152", Handle{"c1", 1, "1a5d59f0-efa1-4e4a-8f61-262da0ad9152"}},
		// Rook's cluster IDs are namespace names; a cluster ID may itself contain dashes
		{"0001-0009-rook-ceph-0000000000000002-00000000-1111-2222-3333-444444444444", Handle{"rook-ceph", 2, "00000000-1111-2222-3333-444444444444"}},
		{"0001-0024-b9127830-b0cc-4e34-aa47-9d1a2e9949a8-00000000000003ff-ffffffff-1111-2222-3333-444444444444",
			Handle{"b9127830-b0cc-4e34-aa47-9d1a2e9949a8", 1023, "ffffffff-1111-2222-3333-444444444444"}},
	} {
		got, err := ParseHandle(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseHandle(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		if got.String() != tc.in {
			t.Errorf("%+v encodes as %q, want %q", got, got.String(), tc.in)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", got, err)
		}
	}
}

func TestParseHandleRejects(t *testing.T) {
	const u = "c050fde3-2a93-4a45-900c-96bcc96c6b40"
	for _, s := range []string{
		"", "0001-", "rv1:local:2::abcdefghijklmnop",
		"0002-0002-c1-0000000000000002-" + u,                  // another version
		"0001-0003-c1-0000000000000002-" + u,                  // length disagrees
		"0001-0002-c1-000000000000002-" + u,                   // short location
		"0001-0002-c1-0000000000000002-" + strings.ToUpper(u), // not what ceph-csi writes
		"0001-0002-c1-000000000000000G-" + u,
		"0001-0002-c1-8000000000000000-" + u, // negative as int64
		"0001-000A-c1-0000000000000002-" + u,
		"0001-0002-c1_0000000000000002-" + u,
		"0001-0002-c1-0000000000000002_" + u,
		"0001-0002-c1-0000000000000002-" + u + "x",
		"0001-0002-c1-0000000000000002-" + strings.Replace(u, "-", "x", 1),
		"0001-0000--0000000000000002-" + u,
		"0001-0041-" + strings.Repeat("c", 65) + "-0000000000000002-" + u,
	} {
		if _, err := ParseHandle(s); !errors.Is(err, ErrNotHandle) {
			t.Errorf("ParseHandle(%q) error = %v, want ErrNotHandle", s, err)
		}
	}
}

func FuzzParseHandle(f *testing.F) {
	f.Add("0001-0002-c1-0000000000000002-c050fde3-2a93-4a45-900c-96bcc96c6b40")
	f.Add("0001-0009-rook-ceph-0000000000000002-00000000-1111-2222-3333-444444444444")
	f.Add("0001-ffff--")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHandle(s)
		if err != nil {
			if !errors.Is(err, ErrNotHandle) {
				t.Fatalf("ParseHandle(%q) = %v, not ErrNotHandle", s, err)
			}
			return
		}
		if h.String() != s {
			t.Fatalf("decoded %q but encodes as %q", s, h.String())
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("decoded %q into %+v, which does not validate: %v", s, h, err)
		}
	})
}
