package driver

import (
	"strings"
	"testing"
)

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

func TestTopologyOf(t *testing.T) {
	labels := map[string]string{"topology.kubernetes.io/zone": "z1", "rack": "r1"}
	got, err := topologyOf(labels, "topology.rbd.monoceph.io/", []string{"topology.kubernetes.io/zone", "rack"})
	if err != nil || len(got) != 2 || got["topology.rbd.monoceph.io/zone"] != "z1" || got["topology.rbd.monoceph.io/rack"] != "r1" {
		t.Errorf("topologyOf = %v, %v", got, err)
	}
	if _, err := topologyOf(labels, "p/", []string{"topology.kubernetes.io/region"}); err == nil || !strings.Contains(err.Error(), "topology.kubernetes.io/region") {
		t.Errorf("missing label: %v, want an error naming it", err)
	}
}
