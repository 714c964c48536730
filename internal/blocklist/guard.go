package blocklist

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	v1 "github.com/monoceph/monoceph/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ForceParameter overrides the self-fencing guard (a FenceClusterNetwork parameter; the
// guard's refusals name it).
const ForceParameter = "force"

// Guard returns FAILED_PRECONDITION when a prefix covers cl's own client address (this
// process's) or the address of one of the cluster's daemons (c's monitors among them); an
// address it cannot learn is an error too.
func Guard(ctx context.Context, cl Cluster, c v1.Cluster, prefixes []netip.Prefix) error {
	prot, err := protectedAddrs(ctx, cl, c)
	if err != nil {
		return err
	}
	return checkSelfFence(prefixes, prot)
}

// protected is an address a fence must not cover without force, and why.
type protected struct {
	addr netip.Addr
	what string
}

// protectedAddrs are this controller's own Ceph client addresses and those of the cluster's
// monitors, managers and MDSs: a fence covering the first cuts this driver's clients off the
// cluster (and with them its way to recover), one covering a daemon's host cuts off the Ceph
// daemons running there (their own client sessions: a manager's modules, an MDS's journal and
// metadata I/O). An address the guard cannot learn fails the fence rather than waving it
// through.
func protectedAddrs(ctx context.Context, cl Cluster, c v1.Cluster) ([]protected, error) {
	own, err := cl.ClientAddrs(ctx)
	if err != nil {
		return nil, err
	}
	if len(own) == 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"cannot tell this controller's own Ceph client address (librados has not learnt it), so cannot check that the fence spares it; parameter %s: \"true\" fences anyway", ForceParameter)
	}
	var out []protected
	for _, a := range own {
		out = append(out, protected{a, "this controller's own Ceph client address"})
	}
	mons, err := cl.MonitorAddrs(ctx)
	if err != nil {
		return nil, err
	}
	// the cluster map's monitors too, in case the monmap lists them under other addresses
	for _, m := range c.Monitors {
		eps, _ := v1.MonitorEndpoints(m)
		for _, ep := range eps {
			if ap, err := netip.ParseAddrPort(ep); err == nil && !containsAddr(mons, ap.Addr().Unmap()) {
				mons = append(mons, ap.Addr().Unmap())
			}
		}
	}
	for _, a := range mons {
		out = append(out, protected{a, "a monitor address"})
	}
	for _, d := range []struct {
		what  string
		addrs func(context.Context) ([]netip.Addr, error)
	}{{"a manager address", cl.ManagerAddrs}, {"an MDS address", cl.MDSAddrs}} {
		addrs, err := d.addrs(ctx)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			out = append(out, protected{a, d.what})
		}
	}
	return out, nil
}

// checkSelfFence refuses prefixes that cover a protected address.
func checkSelfFence(prefixes []netip.Prefix, prot []protected) error {
	var refused []string
	for _, p := range prefixes {
		for _, a := range prot {
			if p.Contains(a.addr) {
				refused = append(refused, fmt.Sprintf("%s contains %s, %s", p, a.addr, a.what))
			}
		}
	}
	if len(refused) == 0 {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition,
		"refusing to fence: %s; fencing it would cut this driver or the cluster's own daemons off and leave nothing able to unfence; parameter %s: \"true\" fences anyway",
		strings.Join(refused, "; "), ForceParameter)
}
