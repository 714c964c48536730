package blocklist

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func rangeEntry(s string) Entry { return Entry{Prefix: netip.MustParsePrefix(s), Range: true} }
func addrEntry(s string) Entry  { return Entry{Prefix: single(netip.MustParseAddr(s))} }

var testOpts = Options{}.WithDefaults()

func TestFenceWithRangesIsOneEntryPerCIDRAndIdempotent(t *testing.T) {
	ctx := context.Background()
	bl := NewFake(true)
	ps := prefixes("192.0.2.0/24", "198.51.100.7/32", "10.0.0.0/8", "2001:db8::/64")
	res, err := Fence(ctx, bl, testOpts, ps)
	if err != nil || res.Changed != 4 || bl.Len() != 4 {
		t.Fatalf("fence: %+v, %v; %d entries", res, err, bl.Len())
	}
	for _, p := range ps {
		if !bl.Has(Entry{Prefix: p, Range: true}) {
			t.Errorf("no range entry for %s", p)
		}
	}
	// again: nothing sent, nothing changed
	adds, _ := bl.Counts()
	res, err = Fence(ctx, bl, testOpts, ps)
	if again, _ := bl.Counts(); err != nil || res.Changed != 0 || res.Unchanged != 4 || again != adds {
		t.Fatalf("second fence: %+v, %v, %d more adds", res, err, again-adds)
	}
	res, err = Unfence(ctx, bl, testOpts, ps)
	if err != nil || res.Changed != 4 || bl.Len() != 0 {
		t.Fatalf("unfence: %+v, %v; %d entries left", res, err, bl.Len())
	}
	_, removes := bl.Counts()
	res, err = Unfence(ctx, bl, testOpts, ps)
	if _, again := bl.Counts(); err != nil || res.Changed != 0 || again != removes {
		t.Fatalf("second unfence: %+v, %v, %d more removes", res, err, again-removes)
	}
}

func TestFenceRenewsOnlyShortLivedEntries(t *testing.T) {
	ctx := context.Background()
	bl := NewFake(true)
	short := rangeEntry("192.0.2.0/24")
	long := rangeEntry("198.51.100.0/24")
	bl.Put(Listed{Entry: short, Until: time.Now().Add(10 * time.Minute)})
	bl.Put(Listed{Entry: long, Until: time.Now().Add(4 * 365 * 24 * time.Hour)})
	// an instance entry blocks one client, not the address: it does not make the address fenced
	bl.Put(Listed{Entry: addrEntry("192.0.2.77"), Instance: true, Until: time.Now().Add(time.Hour)})
	res, err := Fence(ctx, bl, testOpts, prefixes("192.0.2.0/24", "198.51.100.0/24"))
	// the long-lived entry nobody recorded fences as it is, and stays somebody else's
	if err != nil || res.Changed != 1 || res.Unchanged != 0 || res.Foreign != 1 {
		t.Fatalf("fence: %+v, %v", res, err)
	}
	if !bl.RecordedNow(short) || bl.RecordedNow(long) {
		t.Errorf("recorded: renewed entry %v, foreign entry %v; want true, false", bl.RecordedNow(short), bl.RecordedNow(long))
	}
	l, _ := bl.List(ctx)
	for _, e := range l {
		if e.Entry == short && time.Until(e.Until) < DefaultExpiry-time.Hour {
			t.Errorf("short-lived entry not renewed: until %v", e.Until)
		}
	}
}

func TestFallbackExpandsSmallRangesOnly(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		opts    Options
		cidrs   []string
		entries int
		err     string
	}{
		{name: "single v4", cidrs: []string{"192.0.2.9/32"}, entries: 1},
		{name: "/30", cidrs: []string{"192.0.2.252/30"}, entries: 4},
		{name: "/24 at the default limit", cidrs: []string{"192.0.2.0/24"}, entries: 256},
		{name: "/23 beyond it", cidrs: []string{"192.0.2.0/23"}, err: "192.0.2.0/23 has 2^9 addresses"},
		{name: "v6 /120", cidrs: []string{"2001:db8::/120"}, entries: 256},
		{name: "v6 /119", cidrs: []string{"2001:db8::/119"}, err: "up to /120"},
		{name: "v6 /64", cidrs: []string{"2001:db8::/64"}, err: "2^64 addresses"},
		{name: "one too wide refuses all", cidrs: []string{"198.51.100.7/32", "10.0.0.0/16"}, err: "10.0.0.0/16"},
		{name: "configured limit", opts: Options{FallbackMaxPrefixV4: 28}, cidrs: []string{"192.0.2.0/27"}, err: "up to /28"},
		{name: "configured limit, within", opts: Options{FallbackMaxPrefixV4: 28}, cidrs: []string{"192.0.2.0/28"}, entries: 16},
		{name: "overlapping CIDRs share entries", cidrs: []string{"192.0.2.0/30", "192.0.2.2/31"}, entries: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bl := NewFake(false)
			opts := tt.opts.WithDefaults()
			ps := prefixes(tt.cidrs...)
			_, err := Fence(ctx, bl, opts, ps)
			if tt.err != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "range blocklist entries") {
					t.Fatalf("err %v, want INVALID_ARGUMENT containing %q", err, tt.err)
				}
				if adds, _ := bl.Counts(); adds != 0 {
					t.Fatalf("%d entries added although the request was refused", adds)
				}
				return
			}
			if err != nil || bl.Len() != tt.entries {
				t.Fatalf("fence: %v; %d entries, want %d", err, bl.Len(), tt.entries)
			}
			for _, p := range ps {
				addrs(p, func(a netip.Addr) bool {
					if !bl.Has(Entry{Prefix: single(a)}) {
						t.Errorf("%s not fenced", a)
					}
					return true
				})
			}
			if _, err := Unfence(ctx, bl, opts, ps); err != nil || bl.Len() != 0 {
				t.Fatalf("unfence: %v; %d entries left", err, bl.Len())
			}
		})
	}
}

// Unfencing removes what fences of the same CIDRs recorded, and nothing else: not an entry an
// operator added by hand (even one a fence would create), not a client instance, not an
// address inside a range too wide to have been expanded, not an entry a fence of another CIDR
// still relies on. Fences made on older monitors (whole addresses) are unfenced after an
// upgrade too.
func TestUnfenceRemovesOnlyWhatFencesRecorded(t *testing.T) {
	ctx := context.Background()
	until := time.Now().Add(4 * 365 * 24 * time.Hour)
	tests := []struct {
		name    string
		ranges  bool
		manual  []Listed // added by hand before the fences
		fences  [][]string
		unfence []string
		kept    []Entry
		gone    []Entry
	}{
		{name: "fenced range", ranges: true, fences: [][]string{{"192.0.2.0/24"}}, unfence: []string{"192.0.2.0/24"},
			gone: []Entry{rangeEntry("192.0.2.0/24")}},
		{name: "manual range of the same CIDR", ranges: true, manual: []Listed{{Entry: rangeEntry("192.0.2.0/24"), Until: until}},
			fences: [][]string{{"192.0.2.0/24"}}, unfence: []string{"192.0.2.0/24"}, kept: []Entry{rangeEntry("192.0.2.0/24")}},
		{name: "manual range, never fenced", ranges: true, manual: []Listed{{Entry: rangeEntry("192.0.2.0/24"), Until: until}},
			unfence: []string{"192.0.2.0/24"}, kept: []Entry{rangeEntry("192.0.2.0/24")}},
		{name: "manual address inside a fallback range", manual: []Listed{{Entry: addrEntry("192.0.2.5"), Until: until}},
			fences: [][]string{{"192.0.2.0/30"}, {"192.0.2.4/30"}}, unfence: []string{"192.0.2.0/30", "192.0.2.4/30"},
			kept: []Entry{addrEntry("192.0.2.5")}, gone: []Entry{addrEntry("192.0.2.0"), addrEntry("192.0.2.4"), addrEntry("192.0.2.7")}},
		{name: "client instance and other CIDRs", ranges: true, manual: []Listed{
			{Entry: addrEntry("192.0.2.200"), Instance: true, Until: until}, {Entry: rangeEntry("192.0.2.0/25"), Until: until},
			{Entry: addrEntry("10.1.2.3"), Until: until}},
			fences: [][]string{{"192.0.2.0/24", "10.0.0.0/8"}}, unfence: []string{"192.0.2.0/24", "10.0.0.0/8"},
			kept: []Entry{addrEntry("192.0.2.200"), rangeEntry("192.0.2.0/25"), addrEntry("10.1.2.3")},
			gone: []Entry{rangeEntry("192.0.2.0/24"), rangeEntry("10.0.0.0/8")}},
		{name: "entries another fence relies on", fences: [][]string{{"192.0.2.0/30"}, {"192.0.2.0/31"}}, unfence: []string{"192.0.2.0/30"},
			kept: []Entry{addrEntry("192.0.2.0"), addrEntry("192.0.2.1")}, gone: []Entry{addrEntry("192.0.2.2"), addrEntry("192.0.2.3")}},
		{name: "fenced before an upgrade, unfenced after", fences: [][]string{{"192.0.2.0/30"}}, unfence: []string{"192.0.2.0/30"},
			gone: []Entry{addrEntry("192.0.2.0"), addrEntry("192.0.2.3")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bl := NewFake(tt.ranges)
			for _, l := range tt.manual {
				bl.Put(l)
			}
			for _, f := range tt.fences {
				if _, err := Fence(ctx, bl, testOpts, prefixes(f...)); err != nil {
					t.Fatal(err)
				}
			}
			bl.ranges = true // the monitors were upgraded in between (no change for the range cases)
			if _, err := Unfence(ctx, bl, testOpts, prefixes(tt.unfence...)); err != nil {
				t.Fatal(err)
			}
			for _, e := range tt.kept {
				if !bl.Has(e) {
					t.Errorf("%v removed", e)
				}
			}
			for _, e := range tt.gone {
				if bl.Has(e) {
					t.Errorf("%v left", e)
				}
			}
			for _, p := range prefixes(tt.unfence...) {
				if _, ok := bl.records[p]; ok {
					t.Errorf("record of %s left", p)
				}
			}
		})
	}
}

// A fence records an entry before it adds it: a fence killed between the two leaves a record
// of an entry that is not there, never an entry no record names (which no unfence would ever
// remove).
func TestFenceRecordsBeforeAdding(t *testing.T) {
	for _, ranges := range []bool{true, false} {
		bl := NewFake(ranges)
		var mu sync.Mutex
		var unrecorded []Entry
		bl.OnAdd = func(e Entry) {
			if !bl.RecordedNow(e) {
				mu.Lock()
				unrecorded = append(unrecorded, e)
				mu.Unlock()
			}
		}
		if _, err := Fence(context.Background(), bl, testOpts, prefixes("192.0.2.0/31")); err != nil {
			t.Fatal(err)
		}
		if len(unrecorded) > 0 {
			t.Errorf("ranges %v: %v added before being recorded", ranges, unrecorded)
		}
		// and a fence that cannot record adds nothing
		bl = NewFake(ranges)
		bl.FailPut = ceph.NewError("config-key set", ceph.ErrPermission, "access denied")
		_, err := Fence(context.Background(), bl, testOpts, prefixes("192.0.2.0/31"))
		if err == nil || !strings.Contains(err.Error(), "config-key") {
			t.Errorf("ranges %v: fence without records: %v", ranges, err)
		}
		if adds, _ := bl.Counts(); adds != 0 {
			t.Errorf("ranges %v: %d entries added without a record", ranges, adds)
		}
	}
}

func TestFenceReportsEveryFailureButKeepsGoing(t *testing.T) {
	bl := NewFake(false)
	bl.FailAdd = errors.New("mon said no")
	_, err := Fence(context.Background(), bl, testOpts, prefixes("192.0.2.0/28"))
	if err == nil || !strings.Contains(err.Error(), "mon said no") || !strings.Contains(err.Error(), "and 15 more failures") {
		t.Fatalf("err %v", err)
	}
	if adds, _ := bl.Counts(); adds != 16 {
		t.Fatalf("%d adds attempted, want 16", adds)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tt := range []struct {
		o  Options
		ok bool
	}{
		{Options{}, true},
		{Options{FallbackMaxPrefixV4: 16, FallbackMaxPrefixV6: 112}, true},
		{Options{FallbackMaxPrefixV4: 32, FallbackMaxPrefixV6: 128}, true},
		{Options{FallbackMaxPrefixV4: 15}, false},
		{Options{FallbackMaxPrefixV4: 33}, false},
		{Options{FallbackMaxPrefixV6: 111}, false},
		{Options{Expiry: -time.Second}, false},
	} {
		if err := tt.o.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: %v", tt.o, err)
		}
	}
}
