package blocklist

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
)

func TestBlocklistBody(t *testing.T) {
	r := func(s string) Entry { return Entry{Prefix: netip.MustParsePrefix(s), Range: true} }
	a := func(s string) Entry { return Entry{Prefix: single(netip.MustParseAddr(s))} }
	tests := []struct {
		op     string
		e      Entry
		expire time.Duration
		want   string
	}{
		// the float literal the monitors insist on, also for whole seconds
		{"add", r("192.0.2.0/24"), 600 * time.Second, `{"prefix":"osd blocklist","range":"range","blocklistop":"add","addr":"192.0.2.0/24","expire":600.0}`},
		{"add", r("2001:db8::/64"), DefaultExpiry, `{"prefix":"osd blocklist","range":"range","blocklistop":"add","addr":"2001:db8::/64","expire":157680000.0}`},
		{"add", r("192.0.2.0/24"), 1500 * time.Millisecond, `"expire":2.0}`},
		{"rm", r("198.51.100.0/24"), 0, `{"prefix":"osd blocklist","range":"range","blocklistop":"rm","addr":"198.51.100.0/24"}`},
		// whole addresses: port 0, nonce 0, never a bare CIDR (Ceph would read /24 as a nonce)
		{"add", a("192.0.2.9"), time.Hour, `{"prefix":"osd blocklist","blocklistop":"add","addr":"192.0.2.9:0/0","expire":3600.0}`},
		{"rm", a("2001:db8::5"), 0, `{"prefix":"osd blocklist","blocklistop":"rm","addr":"[2001:db8::5]:0/0"}`},
	}
	for _, tt := range tests {
		got, err := blocklistBody(tt.op, tt.e, tt.expire)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(string(got), tt.want) {
			t.Errorf("%s %v: body %s, want %s", tt.op, tt.e, got, tt.want)
		}
	}
}

func TestParseBlocklist(t *testing.T) {
	until := time.Date(2026, 11, 21, 17, 32, 38, 53879000, time.UTC)
	l := func(prefix string, rng, instance bool) Listed {
		return Listed{Entry: Entry{Prefix: netip.MustParsePrefix(prefix), Range: rng}, Until: until, Instance: instance}
	}
	inst := func(l Listed, i string) Listed { l.Inst = i; return l }
	tests := []struct {
		name string
		in   string
		want []Listed
		err  string
	}{
		// osd dump as Pacific 16.2.15, Reef 18.2.7 and Tentacle 20.2.4 write it (other fields cut)
		{name: "empty", in: `{"epoch":23,"blocklist":{},"range_blocklist":{}}`},
		{name: "monitors without ranges", in: `{"epoch":3,"blocklist":{"192.0.2.9:0/0":"2026-11-21T17:32:38.053879+0000"}}`,
			want: []Listed{l("192.0.2.9/32", false, false)}},
		{name: "both families, addresses then ranges, each in order", in: `{"blocklist":{"[2001:db8::5]:0/0":"2026-11-21T17:32:38.053879+0000","192.0.2.9:0/0":"2026-11-21T17:32:38.053879+0000"},` +
			`"range_blocklist":{"cidr:[2001:db8::]:0/64":"2026-11-21T17:32:38.053879+0000","cidr:192.0.2.0:0/24":"2026-11-21T17:32:38.053879+0000"}}`,
			want: []Listed{l("192.0.2.9/32", false, false), l("2001:db8::5/128", false, false), l("192.0.2.0/24", true, false), l("2001:db8::/64", true, false)}},
		{name: "client instance and typed address", in: `{"blocklist":{"v2:127.0.0.1:0/3036073822":"2026-11-21T17:32:38.053879+0000","any:192.0.2.9:6800/0":"2026-11-21T17:32:38.053879+0000"}}`,
			want: []Listed{inst(l("192.0.2.9/32", false, true), "192.0.2.9:6800/0"), inst(l("127.0.0.1/32", false, true), "127.0.0.1:0/3036073822")}},
		{name: "range kept with host bits as stored", in: `{"range_blocklist":{"cidr:192.0.2.1:0/24":"2026-11-21T17:32:38.053879+0000"}}`,
			want: []Listed{{Entry: Entry{Prefix: netip.PrefixFrom(netip.MustParseAddr("192.0.2.1"), 24), Range: true}, Until: until}}},
		{name: "unparsable time is zero", in: `{"blocklist":{"192.0.2.9:0/0":"soon"}}`,
			want: []Listed{{Entry: Entry{Prefix: netip.MustParsePrefix("192.0.2.9/32")}}}},
		{name: "nothing at all", in: ``, err: "decode"},
		{name: "garbage", in: `{"blocklist":{"192.0.2.9:0/0"}`, err: "decode"},
		{name: "the ls form is no osd dump", in: `[{"addr":"192.0.2.9:0/0","until":""}][]`, err: "decode"},
		{name: "bad address", in: `{"blocklist":{"nonsense":""}}`, err: "nonsense"},
		{name: "bad range", in: `{"range_blocklist":{"cidr:192.0.2.0:0/40":""}}`, err: "prefix length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseBlocklist([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].Until = got[i].Until.UTC()
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseClientAddrs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"127.0.0.1:0/3036073822", []string{"127.0.0.1"}},
		{"v2:10.0.0.5:0/123", []string{"10.0.0.5"}},
		{"[v2:10.0.0.5:0/123,v1:10.0.0.5:0/123]", []string{"10.0.0.5"}},
		{"[v2:[2001:db8::7]:0/9,v1:[2001:db8::7]:0/9]", []string{"2001:db8::7"}},
		{"[2001:db8::7]:0/9", []string{"2001:db8::7"}},
		{"0.0.0.0:0/123", nil}, // not learnt yet
	}
	for _, tt := range tests {
		got, err := parseClientAddrs(tt.in)
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if !reflect.DeepEqual(s, tt.want) {
			t.Errorf("parseClientAddrs(%q) = %v, want %v", tt.in, s, tt.want)
		}
	}
	if _, err := parseClientAddrs("garbage"); err == nil {
		t.Error("garbage accepted")
	}
}

func TestHasRangeArgument(t *testing.T) {
	withRange := `{"cmd1":{"sig":["osd","blocklist","ls"]},"cmd2":{"sig":["osd","blocklist",{"name":"range","type":"CephString","req":"false"},{"name":"blocklistop","type":"CephChoices","strings":"add|rm"},{"name":"addr","type":"CephEntityAddr"}]}}`
	without := `{"cmd1":{"sig":["osd","blocklist","ls"]},"cmd2":{"sig":["osd","blocklist",{"name":"blocklistop","type":"CephChoices","strings":"add|rm"},{"name":"addr","type":"CephEntityAddr"}]},"cmd3":{"sig":["osd","pool",{"name":"range"}]}}`
	for in, want := range map[string]bool{withRange: true, without: false} {
		table, err := ceph.ParseCommandTable([]byte(in))
		if got := hasRangeArgument(table); err != nil || got != want {
			t.Errorf("hasRangeArgument = %v, %v; want %v", got, err, want)
		}
	}
}

func TestParseMonmap(t *testing.T) {
	in := `{"epoch":1,"mons":[{"rank":0,"name":"a","public_addrs":{"addrvec":[{"type":"v2","addr":"127.0.0.1:3300","nonce":0},{"type":"v1","addr":"127.0.0.1:6789","nonce":0}]}},` +
		`{"rank":1,"name":"b","public_addrs":{"addrvec":[{"type":"v2","addr":"[2001:db8::10]:3300","nonce":0}]}}]}`
	got, err := parseMonmap([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("2001:db8::10")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
