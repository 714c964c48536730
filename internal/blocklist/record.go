package blocklist

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// RecordKeyPrefix is where fences record, in the monitors' config-key store, which blocklist
// entries they made. The store is the cluster's own, needs no pool, and survives this process:
// an unfence anywhere removes only what some fence of the same CIDR recorded, never an entry
// an operator or another tool added.
const RecordKeyPrefix = "monoceph/fence/"

// LeastPrivilegeMonCaps are the monitor caps a fencing user needs: read (the guard's monmap,
// manager and MDS addresses, the range-support probe), the blocklist command, and the fence
// records, nothing else of the config-key store.
const LeastPrivilegeMonCaps = `allow r, allow command "osd blocklist", ` +
	`allow command "config-key set" with key prefix ` + RecordKeyPrefix + `, ` +
	`allow command "config-key rm" with key prefix ` + RecordKeyPrefix + `, ` +
	`allow command "config-key dump" with key prefix ` + RecordKeyPrefix

// Record is what fencing one CIDR relies on: its range entry and whole-address entries inside
// it (made on monitors without range support). A record is written before the entries it
// names are added, so a fence killed in between leaves a record naming entries that do not
// exist (unfence skips them), never an entry that no record names (which unfence would then
// leave for five years).
type Record struct {
	Prefix netip.Prefix
	Range  bool
	// Addrs has bit i set for the whole-address entry of the i-th address of Prefix; the
	// fallback limits Prefix to 2^16 addresses, 8 KiB (the store takes 64 KiB per value).
	Addrs []byte
}

// Records is where a cluster keeps its fence records.
type Records interface {
	// ListRecords returns every record, by CIDR.
	ListRecords(ctx context.Context) (map[netip.Prefix]Record, error)
	PutRecord(ctx context.Context, r Record) error
	DeleteRecord(ctx context.Context, p netip.Prefix) error
}

// hostIndex is a's position in p, for p within the fallback limits (at most 16 host bits).
func hostIndex(p netip.Prefix, a netip.Addr) (int, bool) {
	host := p.Addr().BitLen() - p.Bits()
	if host > 16 || !p.Contains(a) {
		return 0, false
	}
	b := a.As16()
	return (int(b[14])<<8 | int(b[15])) & (1<<host - 1), true
}

// has reports whether r names e.
func (r Record) has(e Entry) bool {
	if e.Range {
		return r.Range && e.Prefix == r.Prefix
	}
	i, ok := hostIndex(r.Prefix, e.Prefix.Addr())
	return ok && i/8 < len(r.Addrs) && r.Addrs[i/8]&(1<<(i%8)) != 0
}

// add names e in r; e must be r's range entry or an address inside it.
func (r *Record) add(e Entry) {
	if e.Range {
		r.Range = r.Range || e.Prefix == r.Prefix
		return
	}
	i, ok := hostIndex(r.Prefix, e.Prefix.Addr())
	if !ok {
		return
	}
	if n := 1 << (r.Prefix.Addr().BitLen() - r.Prefix.Bits()); len(r.Addrs) < (n+7)/8 {
		r.Addrs = append(r.Addrs, make([]byte, (n+7)/8-len(r.Addrs))...)
	}
	r.Addrs[i/8] |= 1 << (i % 8)
}

// entries are the entries r names.
func (r Record) entries() []Entry {
	var out []Entry
	if r.Range {
		out = append(out, Entry{Prefix: r.Prefix, Range: true})
	}
	if len(r.Addrs) > 0 {
		addrs(r.Prefix, func(a netip.Addr) bool {
			if e := (Entry{Prefix: single(a)}); r.has(e) {
				out = append(out, e)
			}
			return true
		})
	}
	return out
}

func (r Record) equal(o Record) bool {
	return r.Prefix == o.Prefix && r.Range == o.Range && string(trimZeros(r.Addrs)) == string(trimZeros(o.Addrs))
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// recordValue is a record as stored (the key holds the CIDR).
type recordValue struct {
	Range bool   `json:"range,omitempty"`
	Addrs []byte `json:"addrs,omitempty"` // base64 in JSON
}

func recordKey(p netip.Prefix) string { return RecordKeyPrefix + p.String() }

func encodeRecord(r Record) (key, value string, err error) {
	b, err := json.Marshal(recordValue{Range: r.Range, Addrs: trimZeros(r.Addrs)})
	return recordKey(r.Prefix), string(b), err
}

// decodeRecords reads `config-key dump monoceph/fence/`: {"<key>": "<value>", ...}. Keys that
// do not parse are not fence records of this driver and are left out.
func decodeRecords(out []byte) (map[netip.Prefix]Record, error) {
	var kv map[string]string
	if err := json.Unmarshal(out, &kv); err != nil {
		return nil, fmt.Errorf("decode config-key dump: %w", err)
	}
	recs := make(map[netip.Prefix]Record, len(kv))
	for k, v := range kv {
		s, ok := strings.CutPrefix(k, RecordKeyPrefix)
		if !ok {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil || p != p.Masked() {
			continue
		}
		var rv recordValue
		if err := json.Unmarshal([]byte(v), &rv); err != nil {
			return nil, fmt.Errorf("fence record %s: %w", k, err)
		}
		recs[p] = Record{Prefix: p, Range: rv.Range, Addrs: rv.Addrs}
	}
	return recs, nil
}
