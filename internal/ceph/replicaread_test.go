package ceph

import "testing"

func TestReleaseAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release, min string
		want         bool
	}{
		{"octopus", "octopus", true},
		{"pacific", "octopus", true},
		{"tentacle", "octopus", true},
		{"umbrella", "octopus", true}, // newer than this driver knows
		{"nautilus", "octopus", false},
		{"luminous", "octopus", false},
		{"", "octopus", false}, // an answer without the field allows nothing
		{"Reef", "octopus", true},
	} {
		if got := ReleaseAtLeast(tc.release, tc.min); got != tc.want {
			t.Errorf("ReleaseAtLeast(%q, %q) = %v, want %v", tc.release, tc.min, got, tc.want)
		}
	}
}
