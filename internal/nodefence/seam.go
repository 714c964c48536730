package nodefence

import (
	"context"
	"net/netip"
)

// Blocklist is one cluster's OSD blocklist as the fencer uses it (blocklist.Direct on a connection
// of the controller): the seam between the fencer's decisions, which are tested without a
// cluster, and Ceph.
type Blocklist interface {
	// Guard refuses prefixes that cover the controller's own client address or a daemon's.
	Guard(ctx context.Context, prefixes []netip.Prefix) error
	// Present are the prefixes fenced already by entries fencing them would create.
	Present(ctx context.Context, prefixes []netip.Prefix) ([]netip.Prefix, error)
	// Fence adds the missing entries and returns how many it added.
	Fence(ctx context.Context, prefixes []netip.Prefix) (int, error)
	// Unfence removes the entries fencing the prefixes creates and returns how many it removed.
	Unfence(ctx context.Context, prefixes []netip.Prefix) (int, error)
}

// Fencers opens the blocklist of one cluster of the map with the controller's own
// credentials; release gives its connection back.
type Fencers func(ctx context.Context, clusterID string) (bl Blocklist, release func(), err error)
