package cephcsi

import "testing"

func TestUUIDOf(t *testing.T) {
	const u = "c050fde3-2a93-4a45-900c-96bcc96c6b40"
	for in, want := range map[string]string{
		"csi-vol-" + u: u, "csi-snap-" + u: u, "foo-bar-" + u: u, u: u,
		"csi-vol-" + u + "-temp": "", "csi-vol-abc": "", "": "",
	} {
		if got := UUIDOf(in); got != want {
			t.Errorf("UUIDOf(%q) = %q, want %q", in, got, want)
		}
	}
}
