package kubetest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// lowestFreePort is where FreePort's ports start: above the ports of the tests' Ceph clusters
// (3300-3800 for the monitors, 6800-9400 for the daemons).
const lowestFreePort = 10000

var (
	portsMu sync.Mutex
	given   = map[int]bool{} // ports this process handed out: never twice
)

// FreePort returns a TCP port nothing listens on, on any address, for a listener a test starts
// later. It is picked below the kernel's ephemeral range (ip_local_port_range): a port from
// that range (what listening on port 0 gives) can be taken as the source port of any outgoing
// connection between the pick and the listen, which in the e2e is minutes (its pods start
// late), and the listener then fails with "address already in use" (CI, 2026-11-29: a node
// plugin's --metrics-address on 127.0.0.3:33775). Below that range only another listener can
// take it.
func FreePort(t testing.TB) int {
	t.Helper()
	hi, err := ephemeralStart()
	if err != nil {
		t.Fatal(err)
	}
	if hi <= lowestFreePort+1000 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for the tests' listeners", hi)
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		p := lowestFreePort + rand.IntN(hi-lowestFreePort)
		if given[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", p)) // every address: the nodes' 127.0.0.x too
		if err != nil {
			continue
		}
		l.Close()
		given[p] = true
		return p
	}
	t.Fatalf("no free TCP port in %d-%d after 200 tries", lowestFreePort, hi-1)
	return 0
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() (int, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, fmt.Errorf("ip_local_port_range: %q", b)
	}
	return strconv.Atoi(f[0])
}
