package blocklist

import (
	"context"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Fake is an in-memory Store for tests, here and of the packages that fence through this
// one: a blocklist, with or without range support, and fence records, counting commands.
type Fake struct {
	mu      sync.Mutex
	ranges  bool
	entries map[Entry]Listed
	records map[netip.Prefix]Record
	adds    int
	removes int
	lists   int
	// FailAdd, FailList and FailPut fail every Add, List and PutRecord when set.
	FailAdd  error
	FailList error
	FailPut  error
	// OnAdd is called before an add, outside the lock.
	OnAdd func(Entry)
}

// NewFake is an empty blocklist of monitors with or without range support.
func NewFake(ranges bool) *Fake {
	return &Fake{ranges: ranges, entries: map[Entry]Listed{}, records: map[netip.Prefix]Record{}}
}

func (f *Fake) ListRecords(context.Context) (map[netip.Prefix]Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[netip.Prefix]Record, len(f.records))
	for p, r := range f.records {
		r.Addrs = append([]byte(nil), r.Addrs...)
		out[p] = r
	}
	return out, nil
}

func (f *Fake) PutRecord(_ context.Context, r Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.FailPut != nil {
		return f.FailPut
	}
	r.Addrs = append([]byte(nil), r.Addrs...)
	f.records[r.Prefix] = r
	return nil
}

func (f *Fake) DeleteRecord(_ context.Context, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.records, p)
	return nil
}

// RecordedNow reports whether a record names e at this moment.
func (f *Fake) RecordedNow(e Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Recorded(f.records, e)
}

func (f *Fake) SupportsRanges(context.Context) (bool, error) { return f.ranges, nil }

func (f *Fake) List(context.Context) ([]Listed, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.FailList != nil {
		return nil, f.FailList
	}
	out := make([]Listed, 0, len(f.entries))
	for _, l := range f.entries {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prefix.String() < out[j].Prefix.String() })
	return out, nil
}

func (f *Fake) Add(_ context.Context, e Entry, expire time.Duration) error {
	if f.OnAdd != nil {
		f.OnAdd(e)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.adds++
	if f.FailAdd != nil {
		return f.FailAdd
	}
	if e.Range && !f.ranges {
		panic("range entry sent to monitors without range support")
	}
	f.entries[e] = Listed{Entry: e, Until: time.Now().Add(expire)}
	return nil
}

func (f *Fake) Remove(_ context.Context, e Entry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removes++
	delete(f.entries, e)
	return nil
}

// Put adds an entry directly, as somebody else would have.
func (f *Fake) Put(l Listed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries[l.Entry] = l
}

// Has reports whether the blocklist holds e.
func (f *Fake) Has(e Entry) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.entries[e]
	return ok
}

// Len is the number of entries.
func (f *Fake) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.entries)
}

// Counts are the adds and removes so far.
func (f *Fake) Counts() (adds, removes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.adds, f.removes
}
