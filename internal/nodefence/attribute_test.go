package nodefence

import (
	"fmt"
	"testing"
)

func TestParseNodeNetworks(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{"", "[]", true},
		{"10.20.0.0/16, 2001:db8:20::/64", "[10.20.0.0/16 2001:db8:20::/64]", true},
		{"10.20.0.1/16", "", false}, // host bits: a typo for a range or an address?
		{"0.0.0.0/0", "", false},    // every address: the check would be gone
		{"10.20.0.0", "", false},
	} {
		got, err := ParseNodeNetworks(c.in)
		if (err == nil) != c.ok || c.ok && fmt.Sprint(got) != c.want {
			t.Errorf("ParseNodeNetworks(%q) = %v, %v; want %s, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
