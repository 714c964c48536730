package driver

import "testing"

func TestBracketIPv6(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.5:9080", "10.0.0.5:9080"},
		{":9080", ":9080"},
		{"[fd00::1]:9080", "[fd00::1]:9080"},
		{"fd00::1:9080", "[fd00::1]:9080"}, // status.hostIP of an IPv6 node, then ":port"
		{"::1:9080", "[::1]:9080"},
		{"localhost:9080", "localhost:9080"},
		{"nonsense", "nonsense"},
		{"a:b:c", "a:b:c"}, // not an address: left for net.Listen to refuse
	} {
		if got := bracketIPv6(tt.in); got != tt.want {
			t.Errorf("bracketIPv6(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
