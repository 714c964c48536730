package blocklist

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/ceph/go-ceph/rados"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
)

// Cluster is one connected Ceph cluster, as fencing needs it.
type Cluster interface {
	Store
	// ClientAddrs are this process's own Ceph client addresses, as the cluster sees them.
	ClientAddrs(ctx context.Context) ([]netip.Addr, error)
	// MonitorAddrs are the monitors' addresses from the cluster's monmap.
	MonitorAddrs(ctx context.Context) ([]netip.Addr, error)
	// ManagerAddrs are the managers' addresses, active and standby.
	ManagerAddrs(ctx context.Context) ([]netip.Addr, error)
	// MDSAddrs are the addresses of every MDS of every filesystem, standbys included.
	MDSAddrs(ctx context.Context) ([]netip.Addr, error)
	FSID(ctx context.Context) (string, error)
	Release()
}

// Connector opens a cluster as the RPC's credentials. Tests substitute fakes.
type Connector func(ctx context.Context, c v1.Cluster, cred ceph.Credentials) (Cluster, error)

// rangeSupportTTL bounds how long a cluster's answer about range support is trusted: long
// enough to spare the 130 KB command table on every fence, short enough to notice an upgrade.
const rangeSupportTTL = 10 * time.Minute

type rangeSupport struct {
	mu    sync.Mutex
	known map[string]rangeProbe // by monitor list
}

type rangeProbe struct {
	ok bool
	at time.Time
}

// PoolConnector opens clusters through the pool's connections, sharing one cache of the
// monitors' range support.
func PoolConnector(pool *ceph.Pool) Connector {
	rs := &rangeSupport{known: map[string]rangeProbe{}}
	return func(ctx context.Context, c v1.Cluster, cred ceph.Credentials) (Cluster, error) {
		conn, err := pool.Get(ctx, c.MonHost(), cred)
		if err != nil {
			return nil, err
		}
		return &cephCluster{conn: conn, key: c.MonHost(), ranges: rs}, nil
	}
}

// Open is the cluster of conn (which the caller keeps and releases), with a range-support
// cache of its own: for reading and changing the blocklist past any fence (tests' checks and
// cleanups).
func Open(conn *ceph.Conn, monHost string) Cluster {
	return &cephCluster{conn: conn, key: monHost, ranges: &rangeSupport{known: map[string]rangeProbe{}}}
}

// cephCluster implements Cluster with monitor commands on a pooled connection.
type cephCluster struct {
	conn   *ceph.Conn
	key    string
	ranges *rangeSupport
}

func (c *cephCluster) Release() { c.conn.Release() }

func (c *cephCluster) SupportsRanges(ctx context.Context) (bool, error) {
	c.ranges.mu.Lock()
	p, ok := c.ranges.known[c.key]
	c.ranges.mu.Unlock()
	if ok && time.Since(p.at) < rangeSupportTTL {
		return p.ok, nil
	}
	table, err := ceph.MonCommandTable(ctx, c.conn)
	if err != nil {
		return false, err
	}
	supported := hasRangeArgument(table)
	c.ranges.mu.Lock()
	c.ranges.known[c.key] = rangeProbe{ok: supported, at: time.Now()}
	c.ranges.mu.Unlock()
	return supported, nil
}

// hasRangeArgument reads the monitors' command table: range entries exist where the
// `osd blocklist` command declares a "range" argument.
func hasRangeArgument(table ceph.CommandTable) bool {
	s, ok := table.Find("osd", "blocklist")
	return ok && s.Has("range")
}

func (c *cephCluster) List(ctx context.Context) ([]Listed, error) {
	out, err := ceph.MonCommandRaw(ctx, c.conn, "osd dump", []byte(`{"prefix":"osd dump","format":"json"}`))
	if err != nil {
		return nil, err
	}
	return parseBlocklist(out)
}

func (c *cephCluster) Add(ctx context.Context, e Entry, expire time.Duration) error {
	return c.blocklist(ctx, "add", e, expire)
}

func (c *cephCluster) Remove(ctx context.Context, e Entry) error {
	return c.blocklist(ctx, "rm", e, 0)
}

func (c *cephCluster) blocklist(ctx context.Context, op string, e Entry, expire time.Duration) error {
	body, err := blocklistBody(op, e, expire)
	if err != nil {
		return err
	}
	_, err = ceph.MonCommandRaw(ctx, c.conn, "osd blocklist "+op+" "+e.String(), body)
	return err
}

func (c *cephCluster) ClientAddrs(ctx context.Context) ([]netip.Addr, error) {
	s, err := ceph.Call(ctx, c.conn, "get client address", func(r *rados.Conn) (string, error) { return r.GetAddrs() })
	if err != nil {
		return nil, err
	}
	return parseClientAddrs(s)
}

func (c *cephCluster) MonitorAddrs(ctx context.Context) ([]netip.Addr, error) {
	out, err := ceph.MonCommandRaw(ctx, c.conn, "mon dump", []byte(`{"prefix":"mon dump","format":"json"}`))
	if err != nil {
		return nil, err
	}
	return parseMonmap(out)
}

func (c *cephCluster) FSID(ctx context.Context) (string, error) {
	return ceph.Call(ctx, c.conn, "get fsid", func(r *rados.Conn) (string, error) { return r.GetFSID() })
}

func (c *cephCluster) ManagerAddrs(ctx context.Context) ([]netip.Addr, error) {
	dump, err := ceph.MonCommandRaw(ctx, c.conn, "mgr dump", []byte(`{"prefix":"mgr dump","format":"json"}`))
	if err != nil {
		return nil, err
	}
	meta, err := ceph.MonCommandRaw(ctx, c.conn, "mgr metadata", []byte(`{"prefix":"mgr metadata","format":"json"}`))
	if err != nil {
		return nil, err
	}
	return parseManagers(dump, meta)
}

func (c *cephCluster) MDSAddrs(ctx context.Context) ([]netip.Addr, error) {
	out, err := ceph.MonCommandRaw(ctx, c.conn, "fs dump", []byte(`{"prefix":"fs dump","format":"json"}`))
	if err != nil {
		return nil, err
	}
	return parseFSMap(out)
}

func (c *cephCluster) ListRecords(ctx context.Context) (map[netip.Prefix]Record, error) {
	body, err := json.Marshal(map[string]string{"prefix": "config-key dump", "key": RecordKeyPrefix})
	if err != nil {
		return nil, err
	}
	out, err := ceph.MonCommandRaw(ctx, c.conn, "config-key dump "+RecordKeyPrefix, body)
	if err != nil {
		return nil, err
	}
	return decodeRecords(out)
}

func (c *cephCluster) PutRecord(ctx context.Context, r Record) error {
	key, val, err := encodeRecord(r)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]string{"prefix": "config-key set", "key": key, "val": val})
	if err != nil {
		return err
	}
	_, err = ceph.MonCommandRaw(ctx, c.conn, "config-key set "+key, body)
	return err
}

func (c *cephCluster) DeleteRecord(ctx context.Context, p netip.Prefix) error {
	body, err := json.Marshal(map[string]string{"prefix": "config-key rm", "key": recordKey(p)})
	if err != nil {
		return err
	}
	_, err = ceph.MonCommandRaw(ctx, c.conn, "config-key rm "+recordKey(p), body)
	return err
}

// addrvec is an entity address vector as Ceph's JSON dumps write it.
type addrvec struct {
	Addrvec []struct {
		Addr string `json:"addr"`
	} `json:"addrvec"`
}

// appendAddrvec adds the IPs of v to list, each once.
func appendAddrvec(list []netip.Addr, v addrvec, what string) ([]netip.Addr, error) {
	for _, a := range v.Addrvec {
		ap, err := netip.ParseAddrPort(a.Addr)
		if err != nil {
			return nil, fmt.Errorf("%s: address %q: %v", what, a.Addr, err)
		}
		if ip := ap.Addr().Unmap(); !containsAddr(list, ip) {
			list = append(list, ip)
		}
	}
	return list, nil
}

// parseMonmap collects every address of every monitor of `mon dump` JSON.
func parseMonmap(out []byte) ([]netip.Addr, error) {
	var m struct {
		Mons []struct {
			PublicAddrs addrvec `json:"public_addrs"`
		} `json:"mons"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("decode mon dump: %w", err)
	}
	var addrs []netip.Addr
	var err error
	for _, mon := range m.Mons {
		if addrs, err = appendAddrvec(addrs, mon.PublicAddrs, "mon dump"); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// parseManagers collects the active manager's addresses from `mgr dump` and every manager's
// (standbys have no address in mgr dump) from `mgr metadata`.
func parseManagers(dump, meta []byte) ([]netip.Addr, error) {
	var d struct {
		ActiveAddrs addrvec `json:"active_addrs"`
	}
	if err := json.Unmarshal(dump, &d); err != nil {
		return nil, fmt.Errorf("decode mgr dump: %w", err)
	}
	addrs, err := appendAddrvec(nil, d.ActiveAddrs, "mgr dump")
	if err != nil {
		return nil, err
	}
	var m []struct {
		Name string `json:"name"`
		Addr string `json:"addr"`
	}
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("decode mgr metadata: %w", err)
	}
	for _, mgr := range m {
		ip, err := netip.ParseAddr(mgr.Addr)
		if err != nil {
			return nil, fmt.Errorf("mgr metadata of %s: address %q: %v", mgr.Name, mgr.Addr, err)
		}
		if ip = ip.Unmap(); !containsAddr(addrs, ip) {
			addrs = append(addrs, ip)
		}
	}
	return addrs, nil
}

// parseFSMap collects the addresses of every MDS of `fs dump` JSON: each filesystem's, and
// the standbys.
func parseFSMap(out []byte) ([]netip.Addr, error) {
	type mds struct {
		Addrs addrvec `json:"addrs"`
	}
	var m struct {
		Filesystems []struct {
			MDSMap struct {
				Info map[string]mds `json:"info"`
			} `json:"mdsmap"`
		} `json:"filesystems"`
		Standbys []mds `json:"standbys"`
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("decode fs dump: %w", err)
	}
	all := m.Standbys
	for _, fs := range m.Filesystems {
		for _, d := range fs.MDSMap.Info {
			all = append(all, d)
		}
	}
	var addrs []netip.Addr
	var err error
	for _, d := range all {
		if addrs, err = appendAddrvec(addrs, d.Addrs, "fs dump"); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}
