package blocklist

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ParseCIDR reads one CIDR of a fence request: an IPv4 or IPv6 network in CIDR notation, or a
// bare address meaning that one address (/32 or /128). It refuses what would fence something
// other than what the caller wrote: host bits set (192.0.2.1/24 is ambiguous: the address or
// its network?), zones, and IPv4-mapped IPv6 (Ceph sees IPv4 clients as IPv4, so such an entry
// would never match).
func ParseCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return netip.Prefix{}, errors.New("empty CIDR")
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("not a CIDR: want 192.0.2.0/24, 2001:db8::/64 or a single address")
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IP address or CIDR: want 192.0.2.0/24, 2001:db8::/64 or a single address")
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("IPv6 zone %q is not allowed: blocklist entries have none", a.Zone())
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("IPv4-mapped IPv6 address: write the IPv4 form (%s)", p.Addr().Unmap())
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("host bits set: the network is %s", m)
	}
	return p, nil
}

// ParseCIDRs validates every entry of a request before anything is fenced, and names each bad
// one, so a caller fixes its list in one round. Duplicates collapse into one.
func ParseCIDRs(in []string) ([]netip.Prefix, error) {
	if len(in) == 0 {
		return nil, errors.New("cidrs: at least one CIDR is required")
	}
	var bad []string
	seen := make(map[netip.Prefix]bool, len(in))
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		p, err := ParseCIDR(s)
		if err != nil {
			bad = append(bad, fmt.Sprintf("cidrs[%d] %q: %v", i, s, err))
			continue
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(bad) > 0 {
		return nil, errors.New(strings.Join(bad, "; "))
	}
	return out, nil
}

// single is the prefix naming exactly one address.
func single(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// addrs calls f for every address of p, in order, until f returns false. Callers bound the
// size first (fallbackAllowed).
func addrs(p netip.Prefix, f func(netip.Addr) bool) {
	for a := p.Addr(); a.IsValid() && p.Contains(a); a = a.Next() {
		if !f(a) {
			return
		}
	}
}
