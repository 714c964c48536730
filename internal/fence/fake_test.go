package fence

import (
	"context"
	"net/netip"
	"sync"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
)

// fakeCluster is a connected cluster around a blocklist.Fake.
type fakeCluster struct {
	*blocklist.Fake
	own      []netip.Addr
	mons     []netip.Addr
	mgrs     []netip.Addr
	mdss     []netip.Addr
	fsid     string
	mu       sync.Mutex
	released int
}

func (c *fakeCluster) ClientAddrs(context.Context) ([]netip.Addr, error)  { return c.own, nil }
func (c *fakeCluster) MonitorAddrs(context.Context) ([]netip.Addr, error) { return c.mons, nil }
func (c *fakeCluster) ManagerAddrs(context.Context) ([]netip.Addr, error) { return c.mgrs, nil }
func (c *fakeCluster) MDSAddrs(context.Context) ([]netip.Addr, error)     { return c.mdss, nil }
func (c *fakeCluster) FSID(context.Context) (string, error)               { return c.fsid, nil }
func (c *fakeCluster) Release()                                           { c.mu.Lock(); c.released++; c.mu.Unlock() }

// fakeClusters is a cluster map.
type fakeClusters v1.ClusterMap

func (m fakeClusters) Cluster(id string) (v1.Cluster, error) {
	if c, ok := v1.ClusterMap(m).Lookup(id); ok {
		return c, nil
	}
	return v1.Cluster{}, errNoCluster(id)
}

type errNoCluster string

func (e errNoCluster) Error() string { return "clusterID " + string(e) + " is not in the cluster map" }

// fakeConnector hands out cl, or err, counting connections.
type fakeConnector struct {
	cl    *fakeCluster
	err   error
	calls int
	mu    sync.Mutex
}

func (f *fakeConnector) connect(context.Context, v1.Cluster, ceph.Credentials) (blocklist.Cluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.cl, nil
}

// prefixes, rangeEntry and addrEntry write the test's CIDRs and entries, as blocklist's own
// tests do.
func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func rangeEntry(s string) blocklist.Entry {
	return blocklist.Entry{Prefix: netip.MustParsePrefix(s), Range: true}
}

func addrEntry(s string) blocklist.Entry {
	a := netip.MustParseAddr(s)
	return blocklist.Entry{Prefix: netip.PrefixFrom(a, a.BitLen())}
}
