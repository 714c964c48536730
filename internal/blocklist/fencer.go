package blocklist

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/monoceph/monoceph/internal/faultpoint"
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
}

// WithDefaults fills in the defaults of the settings left zero.
func (o Options) WithDefaults() Options {
	if o.Expiry <= 0 {
		o.Expiry = DefaultExpiry
	}
	if o.FallbackMaxPrefixV4 <= 0 {
		o.FallbackMaxPrefixV4 = DefaultFallbackMaxPrefixV4
	}
	if o.FallbackMaxPrefixV6 <= 0 {
		o.FallbackMaxPrefixV6 = DefaultFallbackMaxPrefixV6
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
// its range entry, or a whole-address entry inside it when p is within the fallback limit. An
// Unfence removes only such entries, and of those only the ones a record names.
func (o Options) createdBy(e Listed, p netip.Prefix) bool {
	if e.Instance {
		return false
	}
	if e.Range {
		return e.Prefix == p
	}
	return p.Bits() >= o.fallbackLimit(p) && p.Contains(e.Prefix.Addr())
}

// Result counts what a fence or unfence changed.
type Result struct {
	Changed   int // entries added or removed
	Unchanged int // entries already as asked
	Foreign   int // entries that were there but that no fence recorded: left as they are
}

// Store is a cluster's blocklist and the records of what fences made in it.
type Store interface {
	Blocklist
	Records
}

// Fence makes sure every prefix is fenced. It adds the entries that are missing and renews
// those that expire in less than half the configured expiry (an entry someone else added for
// ten minutes must not lift our fence in ten minutes), and records, before adding them, every
// entry the fence relies on that is the driver's: those it adds or renews, and those another
// fence recorded. An entry that was there, long-lived, and that no fence recorded is somebody
// else's: it fences all the same, but it is neither recorded nor ever removed by an unfence.
func Fence(ctx context.Context, st Store, opts Options, prefixes []netip.Prefix) (Result, error) {
	opts = opts.WithDefaults()
	ranges, err := st.SupportsRanges(ctx)
	if err != nil {
		return Result{}, err
	}
	want := make(map[netip.Prefix][]Entry, len(prefixes))
	var bad []string
	for _, p := range prefixes {
		es, err := opts.entriesFor(p, ranges)
		if err != nil {
			bad = append(bad, err.Error())
		}
		want[p] = es
	}
	if len(bad) > 0 {
		return Result{}, status.Error(codes.InvalidArgument, strings.Join(bad, "; "))
	}
	listed, err := st.List(ctx)
	if err != nil {
		return Result{}, err
	}
	recs, err := st.ListRecords(ctx)
	if err != nil {
		return Result{}, recordErr(err)
	}
	until := make(map[Entry]time.Time, len(listed))
	for _, l := range listed {
		if !l.Instance {
			until[l.Entry] = l.Until
		}
	}
	renewBefore := time.Now().Add(opts.Expiry / 2)
	var res Result
	var todo []Entry
	seen := map[Entry]bool{}
	for _, p := range prefixes {
		rec := recs[p]
		rec.Prefix = p
		for _, e := range want[p] {
			t, present := until[e]
			lasting := present && (t.IsZero() || t.After(renewBefore))
			switch {
			case lasting && !Recorded(recs, e):
				res.Foreign++
				continue
			case lasting:
				res.Unchanged++
			case !seen[e]:
				todo = append(todo, e)
			}
			seen[e] = true
			rec.add(e)
		}
		if !rec.equal(recs[p]) {
			if err := st.PutRecord(ctx, rec); err != nil {
				return res, recordErr(err)
			}
			recs[p] = rec
		}
	}
	faultpoint.Hit("fence.recorded")
	err = each(ctx, todo, func(e Entry) error { return st.Add(ctx, e, opts.Expiry) })
	res.Changed = len(todo)
	return res, err
}

// Recorded reports whether any of the records names e.
func Recorded(recs map[netip.Prefix]Record, e Entry) bool {
	for _, r := range recs {
		if r.has(e) {
			return true
		}
	}
	return false
}

// recordErr says what a failure to read or write fence records needs.
func recordErr(err error) error {
	return fmt.Errorf("fence records in the monitors' config-key store (the fencing user needs mon caps allow command \"config-key set\", \"config-key rm\" and \"config-key dump\" with key prefix %s): %w", RecordKeyPrefix, err)
}

// Unfence removes the entries the fences of the prefixes recorded, unless a fence of another
// CIDR recorded them too, then the records. Entries nobody recorded stay: somebody else added
// them. A record outlives its entries until they are all removed, so a retry finishes the job.
func Unfence(ctx context.Context, st Store, opts Options, prefixes []netip.Prefix) (Result, error) {
	opts = opts.WithDefaults()
	recs, err := st.ListRecords(ctx)
	if err != nil {
		return Result{}, recordErr(err)
	}
	listed, err := st.List(ctx)
	if err != nil {
		return Result{}, err
	}
	ours := map[netip.Prefix]bool{}
	for _, p := range prefixes {
		ours[p] = true
	}
	var res Result
	var todo []Entry
	seen := map[Entry]bool{}
	for _, l := range listed {
		for _, p := range prefixes {
			if l.Instance || !opts.createdBy(l, p) || seen[l.Entry] {
				continue
			}
			seen[l.Entry] = true
			r, ok := recs[p]
			switch {
			case !ok || !r.has(l.Entry):
				res.Foreign++
			case recordedElsewhere(recs, ours, l.Entry):
				res.Unchanged++
			default:
				todo = append(todo, l.Entry)
			}
		}
	}
	if err := each(ctx, todo, func(e Entry) error { return st.Remove(ctx, e) }); err != nil {
		return Result{Changed: len(todo)}, err
	}
	res.Changed = len(todo)
	faultpoint.Hit("unfence.removed")
	for _, p := range prefixes {
		if _, ok := recs[p]; ok {
			if err := st.DeleteRecord(ctx, p); err != nil {
				return res, recordErr(err)
			}
		}
	}
	return res, nil
}

// recordedElsewhere reports whether a fence of a CIDR outside ours recorded e.
func recordedElsewhere(recs map[netip.Prefix]Record, ours map[netip.Prefix]bool, e Entry) bool {
	for p, r := range recs {
		if !ours[p] && r.has(e) {
			return true
		}
	}
	return false
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
