package nodefence

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
)

// TestParseSessions reads `client ls` of a Pacific MDS (captured from a ceph-fuse mount with
// the driver's metadata; the second session is a kernel client, edited in).
func TestParseSessions(t *testing.T) {
	raw, err := os.ReadFile("testdata/client-ls-16.2.15.json")
	if err != nil {
		t.Fatal(err)
	}
	ss, err := parseSessions("a", raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []session{{mds: "a", id: 4793, addr: netip.MustParseAddr("127.0.0.1"), node: "node-x", host: "vm", root: "/"},
		{mds: "a", id: 4800, addr: netip.MustParseAddr("10.0.0.7"), host: "worker-7"}}
	if fmt.Sprint(ss) != fmt.Sprint(want) {
		t.Fatalf("sessions %+v, want %+v", ss, want)
	}
	if _, err := parseSessions("a", []byte(`{"not":"a list"}`)); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestClusterRecord(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	var cr ClusterRecord
	if added := cr.add([]netip.Addr{b, a}); fmt.Sprint(added) != "[10.0.0.6/32 10.0.0.5/32]" {
		t.Fatalf("added %v", added)
	}
	if added := cr.add([]netip.Addr{a}); len(added) != 0 || fmt.Sprint(cr.CIDRs) != "[10.0.0.5/32 10.0.0.6/32]" {
		t.Fatalf("added again %v, CIDRs %v", added, cr.CIDRs)
	}
	cr.Preexisting = []netip.Prefix{netip.MustParsePrefix("10.0.0.6/32")}
	if u := cr.Unfence(); fmt.Sprint(u) != "[10.0.0.5/32]" {
		t.Fatalf("unfence %v: the pre-existing entry must stay", u)
	}
}
