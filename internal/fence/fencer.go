package fence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of Options.
const (
	// DefaultExpiry stands in for "until unfenced": Ceph has no permanent blocklist entry.
	DefaultExpiry = 5 * 365 * 24 * time.Hour
	// DefaultFallbackMaxPrefixV4 and V6 bound the per-address fallback to 256 entries.
	DefaultFallbackMaxPrefixV4 = 24
	DefaultFallbackMaxPrefixV6 = 120
	// DefaultTimeout bounds an RPC that arrives without a deadline of its own.
	DefaultTimeout = 2 * time.Minute

	// MinFallbackPrefixV4 and V6 are the widest fallback limits accepted: 65,536 entries.
	MinFallbackPrefixV4 = 16
	MinFallbackPrefixV6 = 112
)

// maxInFlight bounds concurrent blocklist commands. Commands in flight together land in one
// monitor commit (the monitors batch proposals for paxos_propose_interval, 1 s), so a
// 256-address fallback takes a few commits instead of 256 seconds.
const maxInFlight = 64

// Options configure fencing.
type Options struct {
	// Expiry is how long entries live (DefaultExpiry when zero).
	Expiry time.Duration
	// FallbackMaxPrefixV4 and V6 are the widest ranges (as prefix lengths) expanded into
	// whole-address entries on monitors without range support; wider ones are refused.
	FallbackMaxPrefixV4 int
	FallbackMaxPrefixV6 int
	// ServeFenceClients answers GetFenceClients with this process's own client address;
	// right only for a process that runs on the node whose clients are asked for.
	ServeFenceClients bool
	// Timeout bounds an RPC without a deadline (DefaultTimeout when zero).
	Timeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.Expiry <= 0 {
		o.Expiry = DefaultExpiry
	}
	if o.FallbackMaxPrefixV4 <= 0 {
		o.FallbackMaxPrefixV4 = DefaultFallbackMaxPrefixV4
	}
	if o.FallbackMaxPrefixV6 <= 0 {
		o.FallbackMaxPrefixV6 = DefaultFallbackMaxPrefixV6
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Validate reports a setting out of range.
func (o Options) Validate() error {
	if o.Expiry < 0 {
		return fmt.Errorf("fence expiry %v: must be positive", o.Expiry)
	}
	if o.FallbackMaxPrefixV4 != 0 && (o.FallbackMaxPrefixV4 < MinFallbackPrefixV4 || o.FallbackMaxPrefixV4 > 32) {
		return fmt.Errorf("IPv4 fallback limit /%d: want /%d to /32", o.FallbackMaxPrefixV4, MinFallbackPrefixV4)
	}
	if o.FallbackMaxPrefixV6 != 0 && (o.FallbackMaxPrefixV6 < MinFallbackPrefixV6 || o.FallbackMaxPrefixV6 > 128) {
		return fmt.Errorf("IPv6 fallback limit /%d: want /%d to /128", o.FallbackMaxPrefixV6, MinFallbackPrefixV6)
	}
	return nil
}

// fallbackLimit is the widest prefix of p's family the fallback expands.
func (o Options) fallbackLimit(p netip.Prefix) int {
	if p.Addr().Is4() {
		return o.FallbackMaxPrefixV4
	}
	return o.FallbackMaxPrefixV6
}

// entriesFor is what fencing p creates: one range entry where the monitors support ranges,
// else one whole-address entry per address, for ranges within the fallback limit only.
func (o Options) entriesFor(p netip.Prefix, ranges bool) ([]Entry, error) {
	if ranges {
		return []Entry{{Prefix: p, Range: true}}, nil
	}
	if limit := o.fallbackLimit(p); p.Bits() < limit {
		return nil, fmt.Errorf("%s has 2^%d addresses: this cluster's monitors do not support range blocklist entries (Ceph 16.2.15 and later do), and per-address entries are made only for ranges up to /%d; fence smaller CIDRs or upgrade the monitors",
			p, p.Addr().BitLen()-p.Bits(), limit)
	}
	var out []Entry
	addrs(p, func(a netip.Addr) bool {
		out = append(out, Entry{Prefix: single(a)})
		return true
	})
	return out, nil
}

// createdBy reports whether fencing p creates (or, on older monitors, would have created) e:
// its range entry, or a whole-address entry inside it when p is within the fallback limit.
func (o Options) createdBy(e Listed, p netip.Prefix) bool {
	if e.Instance {
		return false
	}
	if e.Range {
		return e.Prefix == p
	}
	return p.Bits() >= o.fallbackLimit(p) && p.Contains(e.Prefix.Addr())
}

// result counts what a fence or unfence changed.
type result struct {
	changed   int // entries added or removed
	unchanged int // entries already as asked
}

// fence makes sure every prefix is fenced: it adds the entries that are missing, and renews
// those that expire in less than half the configured expiry (an entry someone else added for
// ten minutes must not lift our fence in ten minutes). Anything else stays as it is.
func fence(ctx context.Context, bl Blocklist, opts Options, prefixes []netip.Prefix) (result, error) {
	ranges, err := bl.SupportsRanges(ctx)
	if err != nil {
		return result{}, err
	}
	var want []Entry
	var bad []string
	for _, p := range prefixes {
		es, err := opts.entriesFor(p, ranges)
		if err != nil {
			bad = append(bad, err.Error())
		}
		want = append(want, es...)
	}
	if len(bad) > 0 {
		return result{}, status.Error(codes.InvalidArgument, strings.Join(bad, "; "))
	}
	listed, err := bl.List(ctx)
	if err != nil {
		return result{}, err
	}
	until := make(map[Entry]time.Time, len(listed))
	for _, l := range listed {
		if !l.Instance {
			until[l.Entry] = l.Until
		}
	}
	renewBefore := time.Now().Add(opts.Expiry / 2)
	var res result
	var todo []Entry
	seen := make(map[Entry]bool, len(want))
	for _, e := range want {
		if seen[e] {
			continue
		}
		seen[e] = true
		if t, ok := until[e]; ok && (t.IsZero() || t.After(renewBefore)) {
			res.unchanged++
			continue
		}
		todo = append(todo, e)
	}
	err = each(ctx, todo, func(e Entry) error { return bl.Add(ctx, e, opts.Expiry) })
	res.changed = len(todo)
	return res, err
}

// unfence removes exactly the entries fencing the prefixes creates, and only those present.
func unfence(ctx context.Context, bl Blocklist, opts Options, prefixes []netip.Prefix) (result, error) {
	listed, err := bl.List(ctx)
	if err != nil {
		return result{}, err
	}
	var todo []Entry
	seen := map[Entry]bool{}
	for _, l := range listed {
		for _, p := range prefixes {
			if opts.createdBy(l, p) && !seen[l.Entry] {
				seen[l.Entry] = true
				todo = append(todo, l.Entry)
			}
		}
	}
	err = each(ctx, todo, func(e Entry) error { return bl.Remove(ctx, e) })
	return result{changed: len(todo)}, err
}

// each runs f on every entry, maxInFlight at a time, and reports every failure. It carries on
// past failures: a fence half done is retried by the caller, and each entry is idempotent.
func each(ctx context.Context, entries []Entry, f func(Entry) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	sem := make(chan struct{}, maxInFlight)
	for _, e := range entries {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return joinErrors(append(errs, ctx.Err()))
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(e); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return joinErrors(errs)
}

// joinErrors keeps the status message readable when a fallback range fails as a whole.
func joinErrors(errs []error) error {
	if len(errs) > 3 {
		return fmt.Errorf("%w (and %d more failures)", errs[0], len(errs)-1)
	}
	return errors.Join(errs...)
}
