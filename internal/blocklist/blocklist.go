package blocklist

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Entry is one OSD blocklist entry fencing creates or removes.
type Entry struct {
	// Prefix is the fenced network; a whole-address entry has a single-address prefix.
	Prefix netip.Prefix
	// Range marks an `osd blocklist range` entry; otherwise the entry is the whole address
	// Prefix.Addr() (port 0, nonce 0), which blocks every client instance at that address.
	Range bool
}

func (e Entry) String() string {
	if e.Range {
		return "range " + e.Prefix.String()
	}
	return "address " + e.Prefix.Addr().String()
}

// Listed is an entry of the cluster's blocklist.
type Listed struct {
	Entry
	// Until is when the monitors drop the entry; zero when Ceph's time did not parse.
	Until time.Time
	// Instance marks an entry for one client instance (an address with a port or nonce, as
	// Ceph adds when it evicts a client): it does not block the rest of the address, so it
	// neither counts as fencing that address nor is removed by unfencing.
	Instance bool
	// Inst is an instance entry's address as ip:port/nonce (the form watchers are listed in).
	Inst string
}

// Blocklist is the OSD blocklist of one cluster. The monitors implement it (cephCluster); a
// fake in tests drives the per-address fallback without an old cluster.
type Blocklist interface {
	// SupportsRanges reports whether the monitors understand range entries. Older monitors
	// ignore the unknown "range" argument and read 192.0.2.0/24 as address 192.0.2.0 with
	// nonce 24, so a range must never be sent to them.
	SupportsRanges(ctx context.Context) (bool, error)
	List(ctx context.Context) ([]Listed, error)
	Add(ctx context.Context, e Entry, expire time.Duration) error
	Remove(ctx context.Context, e Entry) error
}

// blocklistCommand is the `osd blocklist` mon command. Expire is written by hand: the monitors
// want a JSON float literal (600.0) for a CephFloat and reject the 600 json.Marshal makes of a
// float64 ("bad or missing field 'expire'").
type blocklistCommand struct {
	Prefix string          `json:"prefix"`
	Range  string          `json:"range,omitempty"`
	Op     string          `json:"blocklistop"`
	Addr   string          `json:"addr"`
	Expire json.RawMessage `json:"expire,omitempty"`
}

// floatLiteral writes whole seconds with a decimal point, the form the monitors accept.
func floatLiteral(d time.Duration) json.RawMessage {
	return json.RawMessage(strconv.FormatFloat(d.Round(time.Second).Seconds(), 'f', 1, 64))
}

// cephAddr is the entity address of an entry. Never `osd blocklist add <cidr>`: Ceph reads
// the prefix length of 192.0.2.0/24 as the nonce of address 192.0.2.0, not as a range.
func cephAddr(e Entry) string {
	if e.Range {
		return e.Prefix.String()
	}
	// port 0 and nonce 0: every client instance at the address
	return netip.AddrPortFrom(e.Prefix.Addr(), 0).String() + "/0"
}

func blocklistBody(op string, e Entry, expire time.Duration) ([]byte, error) {
	cmd := blocklistCommand{Prefix: "osd blocklist", Op: op, Addr: cephAddr(e)}
	if e.Range {
		cmd.Range = "range"
	}
	if op == "add" {
		cmd.Expire = floatLiteral(expire)
	}
	return json.Marshal(cmd)
}

// untilLayout is how the monitors print expiry times ("2026-11-21T17:32:38.053879+0000").
const untilLayout = "2006-01-02T15:04:05.999999999-0700"

// osdMapBlocklist is the blocklist as the OSD map holds it (`osd dump`): entity address →
// expiry, ranges keyed "cidr:<address>/<prefix length>". Pacific, Reef and Tentacle all write
// these two maps. `osd blocklist ls` is no stable source: it prints two concatenated arrays up
// to Tentacle 20.2, and Ceph's main branch has a single-object form behind a switch (ceph PR
// 65681) that go-ceph v0.41 cannot read either; Ceph's own tests read `osd dump` too.
type osdMapBlocklist struct {
	Blocklist      map[string]string `json:"blocklist"`
	RangeBlocklist map[string]string `json:"range_blocklist"`
}

type lsEntry struct {
	Addr  string
	Range string
	Until string
}

// parseBlocklist reads the blocklist out of `osd dump` JSON: single addresses, then ranges,
// each in address order. Monitors without range support have no range_blocklist.
func parseBlocklist(out []byte) ([]Listed, error) {
	var m osdMapBlocklist
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("decode osd dump: %w", err)
	}
	var list []Listed
	for _, addr := range slices.Sorted(maps.Keys(m.Blocklist)) {
		l, err := parseListed(lsEntry{Addr: addr, Until: m.Blocklist[addr]})
		if err != nil {
			return nil, fmt.Errorf("osd dump blocklist: %w", err)
		}
		list = append(list, l)
	}
	for _, r := range slices.Sorted(maps.Keys(m.RangeBlocklist)) {
		l, err := parseListed(lsEntry{Range: r, Until: m.RangeBlocklist[r]})
		if err != nil {
			return nil, fmt.Errorf("osd dump range_blocklist: %w", err)
		}
		list = append(list, l)
	}
	return list, nil
}

func parseListed(raw lsEntry) (Listed, error) {
	var l Listed
	if t, err := time.Parse(untilLayout, raw.Until); err == nil {
		l.Until = t
	}
	s := raw.Addr
	if raw.Range != "" {
		s, l.Range = raw.Range, true
	}
	a, port, nonce, err := parseEntityAddr(s)
	if err != nil {
		return Listed{}, err
	}
	if l.Range {
		// a range is stored as an entity address whose nonce holds the prefix length
		bits, err := strconv.Atoi(nonce)
		if err != nil {
			return Listed{}, fmt.Errorf("range %q: bad prefix length", s)
		}
		// kept as stored, host bits and all (a range added by hand as 192.0.2.1/24 stays so),
		// so that it never equals an entry fencing would create or remove
		p := netip.PrefixFrom(a, bits)
		if !p.IsValid() {
			return Listed{}, fmt.Errorf("range %q: bad prefix length", s)
		}
		l.Prefix = p
		return l, nil
	}
	l.Prefix = single(a)
	l.Instance = port != "0" || nonce != "0"
	if l.Instance {
		l.Inst = net.JoinHostPort(a.String(), port) + "/" + nonce
	}
	return l, nil
}

// parseEntityAddr splits Ceph's entity address text ("192.0.2.9:0/0", "[2001:db8::5]:0/0",
// "v2:127.0.0.1:0/3036073822") into its IP, port and nonce.
func parseEntityAddr(s string) (netip.Addr, string, string, error) {
	rest := s
	for _, typ := range []string{"cidr:", "any:", "v1:", "v2:"} {
		rest = strings.TrimPrefix(rest, typ)
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return netip.Addr{}, "", "", fmt.Errorf("address %q: no nonce", s)
	}
	hostPort, nonce := rest[:i], rest[i+1:]
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return netip.Addr{}, "", "", fmt.Errorf("address %q: %v", s, err)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", "", fmt.Errorf("address %q: %v", s, err)
	}
	return a.Unmap(), port, nonce, nil
}

// parseClientAddrs reads rados_getaddrs output, one entity address or an address vector
// ("[v2:10.0.0.5:0/123,v1:10.0.0.5:0/123]"), into distinct IPs. Unspecified addresses
// (0.0.0.0 before the client learnt its own) are left out.
func parseClientAddrs(s string) ([]netip.Addr, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[v") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1] // an address vector; a bracketed IPv6 host never starts with v
	}
	var out []netip.Addr
	for part := range strings.SplitSeq(s, ",") {
		a, _, _, err := parseEntityAddr(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		if !a.IsUnspecified() && !containsAddr(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}
