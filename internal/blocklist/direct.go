package blocklist

import (
	"context"
	"net"
	"net/netip"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
)

// This file is the blocklist for callers inside the driver: the node plugin learning its own
// client address, ControllerUnpublishVolume asking whether a node's clients are cut off, and
// the automatic fencing of out-of-service nodes. They use the same entries, guard and
// idempotent fence and unfence as the csi-addons FenceController.

// ClientAddrs are the addresses conn's client reaches the cluster from, as the cluster sees
// them (the monitors tell a client its address when it connects).
func ClientAddrs(ctx context.Context, conn *ceph.Conn) ([]netip.Addr, error) {
	return (&cephCluster{conn: conn}).ClientAddrs(ctx)
}

// ParseEntityAddr reads a Ceph entity address ("10.0.0.5:0/3036073822", "v2:[2001:db8::5]:0/7")
// into its IP and its normalised ip:port/nonce form.
func ParseEntityAddr(s string) (netip.Addr, string, error) {
	a, port, nonce, err := parseEntityAddr(s)
	if err != nil {
		return netip.Addr{}, "", err
	}
	return a, net.JoinHostPort(a.String(), port) + "/" + nonce, nil
}

// Blocklisted is a cluster's OSD blocklist as listed.
type Blocklisted []Listed

// Covers reports whether a client at addr (instance inst, as ParseEntityAddr gives it) is cut
// off: a range entry containing addr, a whole-address entry for addr, or an entry for that
// very instance (lock breaking and MDS evictions add those).
func (b Blocklisted) Covers(addr netip.Addr, inst string) bool {
	for _, l := range b {
		switch {
		case l.Range && l.Prefix.Contains(addr):
			return true
		case !l.Range && !l.Instance && l.Prefix.Addr() == addr:
			return true
		case l.Instance && inst != "" && l.Inst == inst:
			return true
		}
	}
	return false
}

// ListBlocklist lists the blocklist of conn's cluster.
func ListBlocklist(ctx context.Context, conn *ceph.Conn) (Blocklisted, error) {
	return (&cephCluster{conn: conn}).List(ctx)
}

// Direct fences and unfences the CIDRs of one cluster on a connection the caller opened, with
// the FenceController's entries, self-fencing guard and idempotency.
type Direct struct {
	cl   Cluster
	c    v1.Cluster
	opts Options
}

// NewDirect fences c through conn (which the caller keeps and releases).
func NewDirect(conn *ceph.Conn, c v1.Cluster, opts Options) *Direct {
	return &Direct{cl: &cephCluster{conn: conn, key: c.MonHost(), ranges: sharedRanges}, c: c, opts: opts.WithDefaults()}
}

// sharedRanges caches the monitors' range support for Direct users.
var sharedRanges = &rangeSupport{known: map[string]rangeProbe{}}

// Guard returns FAILED_PRECONDITION when a prefix covers this process's own client address
// or a monitor's.
func (d *Direct) Guard(ctx context.Context, prefixes []netip.Prefix) error {
	return Guard(ctx, d.cl, d.c, prefixes)
}

// Present reports which prefixes are fenced already, entirely by entries fencing them would
// create: entries somebody else made, which an unfence by this caller must leave alone.
func (d *Direct) Present(ctx context.Context, prefixes []netip.Prefix) ([]netip.Prefix, error) {
	ranges, err := d.cl.SupportsRanges(ctx)
	if err != nil {
		return nil, err
	}
	listed, err := d.cl.List(ctx)
	if err != nil {
		return nil, err
	}
	have := map[Entry]bool{}
	for _, l := range listed {
		if !l.Instance {
			have[l.Entry] = true
		}
	}
	var out []netip.Prefix
	for _, p := range prefixes {
		es, err := d.opts.entriesFor(p, ranges)
		if err != nil {
			return nil, err
		}
		all := len(es) > 0
		for _, e := range es {
			all = all && have[e]
		}
		if all {
			out = append(out, p)
		}
	}
	return out, nil
}

// Fence adds the missing entries of every prefix and returns how many it added.
func (d *Direct) Fence(ctx context.Context, prefixes []netip.Prefix) (int, error) {
	res, err := Fence(ctx, d.cl, d.opts, prefixes)
	return res.Changed, err
}

// Unfence removes the entries fencing the prefixes creates and returns how many it removed.
func (d *Direct) Unfence(ctx context.Context, prefixes []netip.Prefix) (int, error) {
	res, err := Unfence(ctx, d.cl, d.opts, prefixes)
	return res.Changed, err
}

// Blocklist lists the cluster's blocklist.
func (d *Direct) Blocklist(ctx context.Context) (Blocklisted, error) { return d.cl.List(ctx) }
