package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// releaseOrder lists Ceph's release names oldest first; an OSD map's require_osd_release is
// one of them (or a newer name this driver does not know, which is newer than all of them).
var releaseOrder = []string{"argonaut", "bobtail", "cuttlefish", "dumpling", "emperor", "firefly", "giant",
	"hammer", "infernalis", "jewel", "kraken", "luminous", "mimic", "nautilus", "octopus", "pacific",
	"quincy", "reef", "squid", "tentacle"}

// ReleaseAtLeast reports whether release (a require_osd_release value) is min or newer. An
// unknown non-empty name is a release newer than this list.
func ReleaseAtLeast(release, min string) bool {
	rank := func(r string) int {
		for i, n := range releaseOrder {
			if n == r {
				return i
			}
		}
		if r == "" {
			return -1
		}
		return len(releaseOrder)
	}
	return rank(strings.ToLower(release)) >= rank(min)
}

// RequireOSDRelease asks the monitors for the OSD map's require_osd_release: the oldest
// release the cluster's OSDs may run, which decides what clients may ask of them.
func RequireOSDRelease(ctx context.Context, c *Conn) (string, error) {
	out, err := MonCommand(ctx, c, map[string]any{"prefix": "osd dump", "format": "json"})
	if err != nil {
		return "", err
	}
	var dump struct {
		RequireOSDRelease string `json:"require_osd_release"`
	}
	if err := json.Unmarshal(out, &dump); err != nil {
		return "", fmt.Errorf("osd dump: %w", err)
	}
	return dump.RequireOSDRelease, nil
}

// ReplicaReadsAllowed reports whether OSDs serve reads from replicas (the localize and balance
// read policies): from Octopus on, where every OSD checks that a replica read is safe. Older
// OSDs could serve stale data from a replica.
func ReplicaReadsAllowed(ctx context.Context, c *Conn) (bool, string, error) {
	r, err := RequireOSDRelease(ctx, c)
	if err != nil {
		return false, "", err
	}
	return ReleaseAtLeast(r, "octopus"), r, nil
}
