package fence

import (
	"context"
	"net/netip"
	"sort"
	"sync"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
)

// fakeBlocklist is an in-memory blocklist, with or without range support, and fence records,
// counting commands.
type fakeBlocklist struct {
	mu       sync.Mutex
	ranges   bool
	entries  map[Entry]Listed
	records  map[netip.Prefix]record
	adds     int
	removes  int
	lists    int
	failAdd  error
	failList error
	failPut  error
	onAdd    func(Entry) // called before an add, outside the lock
}

func newFakeBlocklist(ranges bool) *fakeBlocklist {
	return &fakeBlocklist{ranges: ranges, entries: map[Entry]Listed{}, records: map[netip.Prefix]record{}}
}

func (f *fakeBlocklist) ListRecords(context.Context) (map[netip.Prefix]record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[netip.Prefix]record, len(f.records))
	for p, r := range f.records {
		r.Addrs = append([]byte(nil), r.Addrs...)
		out[p] = r
	}
	return out, nil
}

func (f *fakeBlocklist) PutRecord(_ context.Context, r record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failPut != nil {
		return f.failPut
	}
	r.Addrs = append([]byte(nil), r.Addrs...)
	f.records[r.Prefix] = r
	return nil
}

func (f *fakeBlocklist) DeleteRecord(_ context.Context, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.records, p)
	return nil
}

// recordedNow reports whether a record names e at this moment.
func (f *fakeBlocklist) recordedNow(e Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return recorded(f.records, e)
}

func (f *fakeBlocklist) SupportsRanges(context.Context) (bool, error) { return f.ranges, nil }

func (f *fakeBlocklist) List(context.Context) ([]Listed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.failList != nil {
		return nil, f.failList
	}
	out := make([]Listed, 0, len(f.entries))
	for _, l := range f.entries {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix.String() < out[j].Prefix.String() })
	return out, nil
}

func (f *fakeBlocklist) Add(_ context.Context, e Entry, expire time.Duration) error {
	if f.onAdd != nil {
		f.onAdd(e)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adds++
	if f.failAdd != nil {
		return f.failAdd
	}
	if e.Range && !f.ranges {
		panic("range entry sent to monitors without range support")
	}
	f.entries[e] = Listed{Entry: e, Until: time.Now().Add(expire)}
	return nil
}

func (f *fakeBlocklist) Remove(_ context.Context, e Entry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removes++
	delete(f.entries, e)
	return nil
}

// put adds an entry directly, as somebody else would have.
func (f *fakeBlocklist) put(l Listed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries[l.Entry] = l
}

func (f *fakeBlocklist) has(e Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.entries[e]
	return ok
}

func (f *fakeBlocklist) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

func (f *fakeBlocklist) counts() (adds, removes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.adds, f.removes
}

// fakeCluster is a connected cluster around a fakeBlocklist.
type fakeCluster struct {
	*fakeBlocklist
	own      []netip.Addr
	mons     []netip.Addr
	mgrs     []netip.Addr
	mdss     []netip.Addr
	fsid     string
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

func (f *fakeConnector) connect(context.Context, v1.Cluster, ceph.Credentials) (cluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return f.cl, nil
}
