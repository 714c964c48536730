package nodefence

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The addresses a backend finds are claims: an RBD node plugin writes its client addresses
// into the attachment object with the node-stage key, which can write any object of the pool,
// and a CephFS client announces whatever metadata it likes. Fencing cuts every Ceph client at
// an address for years, so a planted address would be an outage of a host that was not lost.
// The fencer therefore fences only addresses it can tie to the tainted Node itself.

// attribution ties addresses to Nodes: the addresses every Node reports in status.addresses,
// and the node networks an administrator configured (--fence-node-networks: the ranges
// nodes reach Ceph from, for a Ceph-facing address a Node does not report).
type attribution struct {
	node     string
	own      []netip.Addr
	others   map[netip.Addr]string // address → the other Node that reports it
	networks []netip.Prefix
}

// dropped is an address the fencer refused to fence, and why.
type dropped struct {
	addr   netip.Addr
	reason string
}

func (d dropped) String() string { return d.addr.String() + " (" + d.reason + ")" }

// newAttribution reads the addresses of node and of all Nodes (node among them or not).
func newAttribution(node *corev1.Node, all []*corev1.Node, networks []netip.Prefix) *attribution {
	a := &attribution{node: node.Name, own: nodeAddrs(node), others: map[netip.Addr]string{}, networks: networks}
	for _, n := range all {
		if n.Name == node.Name {
			continue
		}
		for _, ip := range nodeAddrs(n) {
			if _, ok := a.others[ip]; !ok {
				a.others[ip] = n.Name
			}
		}
	}
	return a
}

// nodeAddrs are the IP addresses of a Node's status (hostnames and DNS names are skipped).
func nodeAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, na := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(na.Address); err == nil && !slices.Contains(out, ip.Unmap()) {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// split keeps the addresses that are the node's: never one another Node reports (even one
// this node reports too: two Nodes claiming an address cannot both be right, and fencing it
// would cut the live one), else one the node reports or one in a node network.
func (a *attribution) split(addrs []netip.Addr) (keep []netip.Addr, drop []dropped) {
	for _, ip := range addrs {
		ip = ip.Unmap()
		switch other, ok := a.others[ip]; {
		case ok:
			drop = append(drop, dropped{ip, "an address of Node " + other})
		case slices.Contains(a.own, ip) || slices.ContainsFunc(a.networks, func(p netip.Prefix) bool { return p.Contains(ip) }):
			keep = append(keep, ip)
		case !ip.IsValid():
			drop = append(drop, dropped{ip, "not an address"})
		default:
			drop = append(drop, dropped{ip, fmt.Sprintf("neither an address of Node %s nor in a node network", a.node)})
		}
	}
	return keep, drop
}

func droppedList(ds []dropped) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.String()
	}
	return strings.Join(s, ", ")
}

// ParseNodeNetworks reads --fence-node-networks: comma-separated CIDRs.
func ParseNodeNetworks(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("node network %q: %w", f, err)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("node network %q covers every address, which would let any recorded address be fenced", f)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("node network %q has host bits set (did you mean %s?)", f, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}
