package blocklist

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		prefix  string
		entries []Entry
	}{
		{"range", "192.0.2.0/24", []Entry{rangeEntry("192.0.2.0/24")}},
		{"single address", "198.51.100.7/32", []Entry{addrEntry("198.51.100.7")}},
		{"some addresses of a /30", "192.0.2.252/30", []Entry{addrEntry("192.0.2.252"), addrEntry("192.0.2.255")}},
		{"range and addresses (fenced before and after an upgrade)", "192.0.2.0/30", []Entry{rangeEntry("192.0.2.0/30"), addrEntry("192.0.2.1")}},
		{"the widest v4 fallback", "10.1.0.0/16", []Entry{addrEntry("10.1.0.0"), addrEntry("10.1.128.1"), addrEntry("10.1.255.255")}},
		{"v6", "2001:db8::/120", []Entry{addrEntry("2001:db8::"), addrEntry("2001:db8::ff")}},
		{"the widest v6 fallback", "2001:db8::/112", []Entry{addrEntry("2001:db8::ffff")}},
		{"empty", "192.0.2.0/24", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Record{Prefix: netip.MustParsePrefix(tt.prefix)}
			for _, e := range tt.entries {
				r.add(e)
			}
			key, val, err := encodeRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			if key != RecordKeyPrefix+tt.prefix || len(val) > 64<<10 {
				t.Fatalf("key %q, %d-byte value", key, len(val))
			}
			recs, err := decodeRecords([]byte(`{"` + key + `": ` + quote(val) + `, "` + RecordKeyPrefix + `not-a-cidr": "x"}`))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := recs[r.Prefix]
			if !ok || len(recs) != 1 || !got.equal(r) {
				t.Fatalf("decoded %+v from %s", recs, val)
			}
			if !slices.Equal(got.entries(), tt.entries) {
				t.Fatalf("entries %v, want %v", got.entries(), tt.entries)
			}
			// nothing else: not the neighbours, not the range when only addresses were added
			for _, e := range []Entry{addrEntry("192.0.2.2"), rangeEntry("192.0.2.0/25"), addrEntry("10.1.0.1"), addrEntry("203.0.113.1")} {
				if got.has(e) != slices.Contains(tt.entries, e) {
					t.Errorf("has(%v) = %v", e, got.has(e))
				}
			}
		})
	}
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// Outputs of Ceph 16.2.15 (trimmed), as the guard reads them.
func TestParseDaemonAddrs(t *testing.T) {
	mgrDump := `{"epoch": 7, "active_gid": 4102, "active_name": "x", "active_addrs": {"addrvec": [{"type": "v2", "addr": "127.0.0.1:15810", "nonce": 5062}, {"type": "v1", "addr": "127.0.0.1:15811", "nonce": 5062}]}, "active_addr": "127.0.0.1:15811/5062", "available": true, "standbys": [{"gid": 4200, "name": "y"}]}`
	mgrMeta := `[{"name": "x", "addr": "127.0.0.1", "addrs": "127.0.0.1:0/5062", "ceph_release": "pacific", "hostname": "vm"}, {"name": "y", "addr": "10.0.0.7", "addrs": "10.0.0.7:0/77", "hostname": "vm2"}]`
	fsDump := `{"epoch": 5, "standbys": [{"gid": 4120, "name": "b", "addrs": {"addrvec": [{"type": "v2", "addr": "[2001:db8::6]:6800", "nonce": 1}]}}], "filesystems": [{"mdsmap": {"fs_name": "myfs", "info": {"gid_4113": {"gid": 4113, "name": "a", "rank": 0, "state": "up:active", "addr": "127.0.0.1:15809/2582908836", "addrs": {"addrvec": [{"type": "v2", "addr": "127.0.0.1:15808", "nonce": 2582908836}, {"type": "v1", "addr": "127.0.0.1:15809", "nonce": 2582908836}]}}}}, "id": 1}]}`
	for _, tt := range []struct {
		name  string
		parse func() ([]netip.Addr, error)
		want  []string
	}{
		{"managers, active and standby", func() ([]netip.Addr, error) { return parseManagers([]byte(mgrDump), []byte(mgrMeta)) }, []string{"127.0.0.1", "10.0.0.7"}},
		{"MDSs, active and standby", func() ([]netip.Addr, error) { return parseFSMap([]byte(fsDump)) }, []string{"2001:db8::6", "127.0.0.1"}},
		{"no filesystem", func() ([]netip.Addr, error) { return parseFSMap([]byte(`{"epoch":1,"standbys":[],"filesystems":[]}`)) }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse()
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, a := range got {
				s = append(s, a.String())
			}
			if !slices.Equal(s, tt.want) {
				t.Fatalf("= %v, want %v", s, tt.want)
			}
		})
	}
	for _, bad := range []func() error{
		func() error { _, err := parseManagers([]byte(`{`), []byte(mgrMeta)); return err },
		func() error {
			_, err := parseManagers([]byte(mgrDump), []byte(`[{"name":"x","addr":"nowhere"}]`))
			return err
		},
		func() error {
			_, err := parseFSMap([]byte(`{"standbys":[{"addrs":{"addrvec":[{"addr":"x"}]}}]}`))
			return err
		},
	} {
		if bad() == nil {
			t.Error("garbage parsed")
		}
	}
}
