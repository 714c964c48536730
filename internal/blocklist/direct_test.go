package blocklist

import (
	"net/netip"
	"testing"
)

func TestBlocklistedCovers(t *testing.T) {
	bl := Blocklisted{
		{Entry: Entry{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Range: true}},
		{Entry: Entry{Prefix: netip.MustParsePrefix("198.51.100.7/32")}},
		{Entry: Entry{Prefix: netip.MustParsePrefix("203.0.113.5/32")}, Instance: true, Inst: "203.0.113.5:0/42"},
	}
	for _, c := range []struct {
		addr, inst string
		want       bool
	}{
		{"192.0.2.77", "192.0.2.77:0/1", true},      // in a range
		{"198.51.100.7", "198.51.100.7:0/9", true},  // a whole-address entry
		{"198.51.100.8", "198.51.100.8:0/9", false}, // next to it
		{"203.0.113.5", "203.0.113.5:0/42", true},   // that very instance
		{"203.0.113.5", "203.0.113.5:0/43", false},  // another instance at the address
		{"2001:db8::1", "[2001:db8::1]:0/1", false},
	} {
		if got := bl.Covers(netip.MustParseAddr(c.addr), c.inst); got != c.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", c.addr, c.inst, got, c.want)
		}
	}
	for in, want := range map[string]string{"10.0.0.5:0/3036073822": "10.0.0.5:0/3036073822", "v2:[2001:db8::5]:0/7": "[2001:db8::5]:0/7"} {
		if _, inst, err := ParseEntityAddr(in); err != nil || inst != want {
			t.Errorf("ParseEntityAddr(%s) = %s, %v; want %s", in, inst, err, want)
		}
	}
}
