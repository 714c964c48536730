package fence

import (
	"net/netip"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cidrLocks serialise fence and unfence operations whose CIDRs overlap, per cluster: a fence
// of 192.0.2.0/24 and an unfence of 192.0.2.0/25 change the same addresses (and, on monitors
// without range support, the same entries and records), so they must not interleave, although
// their CIDRs differ. Like the volume locks, they never wait: the second operation gets
// ABORTED and its caller retries.
type cidrLocks struct {
	mu   sync.Mutex
	held map[string][]heldCIDR // by cluster ID
}

type heldCIDR struct {
	prefix netip.Prefix
	op     string
}

func newCIDRLocks() *cidrLocks { return &cidrLocks{held: map[string][]heldCIDR{}} }

// tryLock takes every prefix of clusterID for op, or none when one overlaps a held prefix.
func (l *cidrLocks) tryLock(op, clusterID string, prefixes []netip.Prefix) (unlock func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range l.held[clusterID] {
		for _, p := range prefixes {
			if h.prefix.Overlaps(p) {
				return nil, status.Errorf(codes.Aborted, "an operation (%s) on %s, which overlaps %s, is already in progress", h.op, h.prefix, p)
			}
		}
	}
	mine := make([]heldCIDR, len(prefixes))
	for i, p := range prefixes {
		mine[i] = heldCIDR{p, op}
	}
	l.held[clusterID] = append(l.held[clusterID], mine...)
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		rest := l.held[clusterID][:0:0]
		for _, h := range l.held[clusterID] {
			if !containsHeld(mine, h) {
				rest = append(rest, h)
			}
		}
		if len(rest) == 0 {
			delete(l.held, clusterID)
		} else {
			l.held[clusterID] = rest
		}
	}), nil
}

func containsHeld(list []heldCIDR, h heldCIDR) bool {
	for _, m := range list {
		if m == h {
			return true
		}
	}
	return false
}
