package blocklist

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseCIDR(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "192.0.2.0/24", want: "192.0.2.0/24"},
		{in: " 198.51.100.7/32 ", want: "198.51.100.7/32"},
		{in: "198.51.100.7", want: "198.51.100.7/32"},
		{in: "0.0.0.0/0", want: "0.0.0.0/0"},
		{in: "2001:db8::/64", want: "2001:db8::/64"},
		{in: "2001:DB8::5", want: "2001:db8::5/128"},
		{in: "2001:db8:0:0::/48", want: "2001:db8::/48"},
		{in: "", err: "empty CIDR"},
		{in: "   ", err: "empty CIDR"},
		{in: "192.0.2.1/24", err: "host bits set: the network is 192.0.2.0/24"},
		{in: "2001:db8::1/64", err: "host bits set: the network is 2001:db8::/64"},
		{in: "192.0.2.0/33", err: "not a CIDR"},
		{in: "192.0.2.0/-1", err: "not a CIDR"},
		{in: "192.0.2.0/", err: "not a CIDR"},
		{in: "/24", err: "not a CIDR"},
		{in: "192.0.2/24", err: "not a CIDR"},
		{in: "192.000.2.0/24", err: "not a CIDR"},
		{in: "node-1.example.com", err: "not an IP address"},
		{in: "192.0.2.0 /24", err: "not a CIDR"},
		{in: "192.0.2.0/24,198.51.100.0/24", err: "not a CIDR"},
		{in: "fe80::1%eth0", err: "zone"},
		{in: "fe80::1%eth0/64", err: "not a CIDR"},
		{in: "::ffff:192.0.2.1", err: "IPv4-mapped"},
		{in: "::ffff:192.0.2.0/120", err: "IPv4-mapped"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParseCIDR(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("ParseCIDR(%q) = %v, %v; want error containing %q", tt.in, p, err, tt.err)
				}
				return
			}
			if err != nil || p.String() != tt.want {
				t.Fatalf("ParseCIDR(%q) = %v, %v; want %s", tt.in, p, err, tt.want)
			}
		})
	}
}

func TestParseCIDRsNamesEveryBadEntry(t *testing.T) {
	_, err := ParseCIDRs([]string{"192.0.2.0/24", "192.0.2.1/24", "garbage", ""})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`cidrs[1] "192.0.2.1/24": host bits set`, `cidrs[2] "garbage"`, `cidrs[3] "": empty CIDR`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "cidrs[0]") {
		t.Errorf("error names the good entry: %q", err)
	}
	if _, err := ParseCIDRs(nil); err == nil || !strings.Contains(err.Error(), "at least one CIDR") {
		t.Errorf("empty list: %v", err)
	}
	ps, err := ParseCIDRs([]string{"192.0.2.0/24", "192.0.2.0/24", "198.51.100.7"})
	if err != nil || len(ps) != 2 {
		t.Errorf("duplicates: %v, %v", ps, err)
	}
}

func TestAddrsCoversExactlyThePrefix(t *testing.T) {
	for _, tt := range []struct {
		prefix      string
		n           int
		first, last string
	}{
		{"192.0.2.252/30", 4, "192.0.2.252", "192.0.2.255"},
		{"255.255.255.254/31", 2, "255.255.255.254", "255.255.255.255"},
		{"2001:db8::/126", 4, "2001:db8::", "2001:db8::3"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", 1, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	} {
		var got []netip.Addr
		addrs(netip.MustParsePrefix(tt.prefix), func(a netip.Addr) bool { got = append(got, a); return true })
		if len(got) != tt.n || got[0].String() != tt.first || got[len(got)-1].String() != tt.last {
			t.Errorf("addrs(%s) = %v", tt.prefix, got)
		}
	}
}

// FuzzParseCIDR: never a panic; whatever is accepted is a masked, unzoned prefix whose
// canonical text parses back to itself.
func FuzzParseCIDR(f *testing.F) {
	for _, s := range []string{"192.0.2.0/24", "198.51.100.7", "2001:db8::/64", "2001:db8::1", "::/0", "0.0.0.0/0",
		"192.0.2.1/24", "fe80::1%eth0", "::ffff:192.0.2.1", "192.0.2.0/33", "", " ", "/", "1.2.3.4/", "[::1]/128",
		"1.2.3.4/08", "::ffff:0:0/96", "1::/", "\x00", "255.255.255.255/32"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseCIDR(s)
		if err != nil {
			if p.IsValid() {
				t.Fatalf("ParseCIDR(%q) returned %v with error %v", s, p, err)
			}
			return
		}
		if !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			t.Fatalf("ParseCIDR(%q) = %v: not a masked plain prefix", s, p)
		}
		again, err := ParseCIDR(p.String())
		if err != nil || again != p {
			t.Fatalf("ParseCIDR(%q) = %v, but its text parses to %v, %v", s, p, again, err)
		}
	})
}
