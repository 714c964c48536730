package nodefence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFenceOnlyTheNodesAddresses: the addresses a backend finds are claims (an attachment
// object any node-stage key can write, metadata any client can announce): the fencer fences
// those of the tainted Node and of the node networks, never another Node's, and reports each
// address it drops in an event on the Node.
func TestFenceOnlyTheNodesAddresses(t *testing.T) {
	for _, c := range []struct {
		name     string
		nodeB    []string // node-b's addresses (healthy)
		networks string
		recorded []string // a record of an earlier fence of node-a
		found    []string
		want     string // fenced on c1
		dropped  string // "" when no FenceAddressRefused event is wanted
	}{
		{name: "the node's own address", found: []string{"10.0.0.5"}, want: "[10.0.0.5/32]"},
		{name: "another Node's address planted beside it", nodeB: []string{"10.0.0.6"}, found: []string{"10.0.0.5", "10.0.0.6"},
			want: "[10.0.0.5/32]", dropped: "10.0.0.6 (an address of Node node-b)"},
		{name: "an address no Node reports, without node networks", found: []string{"192.0.2.9"},
			want: "[]", dropped: "192.0.2.9 (neither an address of Node node-a nor in a node network)"},
		{name: "an address in a node network", networks: "192.0.2.0/24", found: []string{"192.0.2.9"}, want: "[192.0.2.9/32]"},
		{name: "another Node's address in a node network", nodeB: []string{"10.0.0.6"}, networks: "10.0.0.0/24", found: []string{"10.0.0.6"},
			want: "[]", dropped: "10.0.0.6 (an address of Node node-b)"},
		{name: "an address both Nodes report", nodeB: []string{"10.0.0.5"}, found: []string{"10.0.0.5"},
			want: "[]", dropped: "10.0.0.5 (an address of Node node-b)"},
		{name: "an address recorded earlier that is another Node's now", nodeB: []string{"10.0.0.6"}, recorded: []string{"10.0.0.6/32"},
			found: []string{"10.0.0.5"}, want: "[10.0.0.5/32]", dropped: "10.0.0.6 (an address of Node node-b)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			networks, err := ParseNodeNetworks(c.networks)
			if err != nil {
				t.Fatal(err)
			}
			bl := &fakeBlocklist{}
			be := &fakeBackend{clients: map[string][]netip.Addr{"c1": addrs(c.found...)}}
			r := newFakeRig(t, be, map[string]*fakeBlocklist{"c1": bl}, networks,
				testNode("node-a", true, "10.0.0.5"), testNode("node-b", false, c.nodeB...))
			ctx := context.Background()
			if c.recorded != nil {
				rec := &Record{Clusters: map[string]*ClusterRecord{"c1": {CIDRs: prefixes(c.recorded...)}}}
				if err := r.f.state.save(ctx, "node-a", rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.f.reconcile(ctx, "node-a"); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(bl.entries); got != c.want {
				t.Errorf("fenced %s, want %s", got, c.want)
			}
			if got, want := fmt.Sprint(prefixAddrs(bl.entries)), fmt.Sprint(be.cut["c1"]); bl.entries != nil && got != want {
				t.Errorf("cut %s, fenced %s", want, got)
			}
			events := r.drain()
			refused := hasEvent(events, "Warning FenceAddressRefused")
			if refused != (c.dropped != "") || c.dropped != "" && !hasEvent(events, "Warning FenceAddressRefused rbd.test: not fencing addresses recorded for the node on cluster c1: "+c.dropped) {
				t.Errorf("events %q, want a FenceAddressRefused naming %q", events, c.dropped)
			}
		})
	}
}

// TestFencePartialFailure: a cluster that cannot be reached, or clients the backend could not
// all read, do not keep the fencer from fencing what it found; the rest is reported and
// retried (reconcile fails, so the queue retries).
func TestFencePartialFailure(t *testing.T) {
	for _, c := range []struct {
		name      string
		clients   map[string][]netip.Addr
		backend   error
		wantErr   string
		wantEvent string
	}{
		{name: "one cluster unreachable", clients: map[string][]netip.Addr{"c1": addrs("10.0.0.5"), "c2": addrs("10.0.0.5")},
			wantErr: "cluster c2: cluster c2 unreachable"},
		{name: "one volume unreadable", clients: map[string][]netip.Addr{"c1": addrs("10.0.0.5")}, backend: errors.New("volume pv-1: attachment object: timed out"),
			wantErr: "finding the node's clients: volume pv-1", wantEvent: "Warning FenceIncomplete"},
		{name: "nothing found, one cluster unreadable", backend: errors.New("cluster c2: timed out"),
			wantErr: "finding the node's clients: cluster c2", wantEvent: "Warning FenceIncomplete"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bl := &fakeBlocklist{}
			r := newFakeRig(t, &fakeBackend{clients: c.clients, err: c.backend}, map[string]*fakeBlocklist{"c1": bl}, nil,
				testNode("node-a", true, "10.0.0.5"))
			err := r.f.reconcile(context.Background(), "node-a")
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("reconcile: %v, want an error with %q (so that it is retried)", err, c.wantErr)
			}
			want := "[]"
			if c.clients["c1"] != nil {
				want = "[10.0.0.5/32]"
			}
			if got := fmt.Sprint(bl.entries); got != want {
				t.Errorf("fenced %s on c1, want %s", got, want)
			}
			if events := r.drain(); c.wantEvent != "" && !hasEvent(events, c.wantEvent) {
				t.Errorf("events %q, want %s", events, c.wantEvent)
			}
		})
	}
}

// TestUnfenceKeepsEntriesOtherNodesNeed: node-a and node-b share 10.0.0.7 (node-a fenced it
// first, node-b found it fenced). Lifting node-a's taint lifts its other entry, and 10.0.0.7
// only when node-b does not stay fenced; node-b then owns the entry, so that its own unfence
// lifts it.
func TestUnfenceKeepsEntriesOtherNodesNeed(t *testing.T) {
	shared, own := "10.0.0.7/32", "10.0.0.5/32"
	for _, c := range []struct {
		name       string
		nodeB      *corev1.Node // nil: node-b's Node is gone
		aPre       []string     // node-a's pre-existing entries
		wantLifted string
		wantBPre   string // node-b's pre-existing entries afterwards
	}{
		{name: "node-b tainted", nodeB: testNode("node-b", true), wantLifted: "[" + own + "]", wantBPre: "[]"},
		{name: "node-b deleted", wantLifted: "[" + own + "]", wantBPre: "[]"},
		{name: "node-b back in service", nodeB: testNode("node-b", false), wantLifted: "[" + own + " " + shared + "]", wantBPre: "[" + shared + "]"},
		{name: "the shared entry was somebody else's", nodeB: testNode("node-b", true), aPre: []string{shared},
			wantLifted: "[" + own + "]", wantBPre: "[" + shared + "]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bl := &fakeBlocklist{entries: prefixes(own, shared)}
			nodes := []*corev1.Node{testNode("node-a", false)}
			if c.nodeB != nil {
				nodes = append(nodes, c.nodeB)
			}
			r := newFakeRig(t, &fakeBackend{}, map[string]*fakeBlocklist{"c1": bl}, nil, nodes...)
			ctx := context.Background()
			for n, rec := range map[string]*Record{
				"node-a": {Clusters: map[string]*ClusterRecord{"c1": {CIDRs: prefixes(own, shared), Preexisting: prefixes(c.aPre...)}}},
				"node-b": {Clusters: map[string]*ClusterRecord{"c1": {CIDRs: prefixes(shared), Preexisting: prefixes(shared)}}},
			} {
				if err := r.f.state.save(ctx, n, rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.f.reconcile(ctx, "node-a"); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(bl.unfenced); got != c.wantLifted {
				t.Errorf("lifted %s, want %s", got, c.wantLifted)
			}
			recA, _ := r.f.state.load(ctx, "node-a")
			recB, err := r.f.state.load(ctx, "node-b")
			if err != nil || recA != nil || recB == nil {
				t.Fatalf("records afterwards: node-a %+v, node-b %+v, %v; want node-a's gone, node-b's kept", recA, recB, err)
			}
			if got := fmt.Sprint(recB.Clusters["c1"].Preexisting); got != c.wantBPre {
				t.Errorf("node-b's pre-existing entries %s, want %s", got, c.wantBPre)
			}
		})
	}
}

// TestInvalidStateIsNotActedOn: a record of the state ConfigMap that is not what the fencer
// writes (anyone who may edit ConfigMaps of the namespace could write it) is refused and
// reported: its node is neither fenced nor unfenced, and while any other node's record is
// invalid nothing is unfenced (what that node needs cannot be told); fencing goes on.
func TestInvalidStateIsNotActedOn(t *testing.T) {
	valid := `{"clusters":{"c1":{"cidrs":["10.0.0.5/32"]}}}`
	for _, c := range []struct {
		name         string
		aTainted     bool
		recA, recB   string
		wantUnfenced string
		wantFenced   string
		wantEvent    bool
	}{
		{name: "a range instead of an address", recA: `{"clusters":{"c1":{"cidrs":["10.0.0.0/8"]}}}`, wantEvent: true},
		{name: "a pre-existing entry not recorded", recA: `{"clusters":{"c1":{"cidrs":["10.0.0.5/32"],"preexisting":["10.0.0.9/32"]}}}`, wantEvent: true},
		{name: "an unknown field", recA: `{"clusters":{},"extra":1}`, wantEvent: true},
		{name: "a malformed cluster ID", recA: `{"clusters":{"../c1":{"cidrs":["10.0.0.5/32"]}}}`, wantEvent: true},
		{name: "an address twice", recA: `{"clusters":{"c1":{"cidrs":["10.0.0.5/32","10.0.0.5/32"]}}}`, wantEvent: true},
		{name: "not JSON", recA: `garbage`, wantEvent: true},
		{name: "tainted, with a range recorded", aTainted: true, recA: `{"clusters":{"c1":{"cidrs":["0.0.0.0/0"]}}}`, wantEvent: true},
		{name: "another node's record invalid: no unfence", recA: valid, recB: `{"clusters":{"c1":{"cidrs":["10.0.0.0/8"]}}}`, wantEvent: true},
		{name: "another node's record invalid: fencing goes on", aTainted: true, recA: valid, recB: `garbage`, wantFenced: "[10.0.0.5/32]"},
		{name: "valid", recA: valid, wantUnfenced: "[10.0.0.5/32]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bl := &fakeBlocklist{}
			be := &fakeBackend{clients: map[string][]netip.Addr{"c1": addrs("10.0.0.5")}}
			r := newFakeRig(t, be, map[string]*fakeBlocklist{"c1": bl}, nil, testNode("node-a", c.aTainted, "10.0.0.5"), testNode("node-b", true))
			ctx := context.Background()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.f.state.name, Namespace: r.f.state.namespace},
				Data: map[string]string{"node-a": c.recA}}
			if c.recB != "" {
				cm.Data["node-b"] = c.recB
			}
			if _, err := r.f.opts.Kube.CoreV1().ConfigMaps("ns").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			err := r.f.reconcile(ctx, "node-a")
			if c.wantEvent != (err != nil) {
				t.Errorf("reconcile: %v", err)
			}
			if got, want := fmt.Sprint(bl.unfenced), fmt.Sprint(prefixes()); c.wantUnfenced == "" && got != want || c.wantUnfenced != "" && got != c.wantUnfenced {
				t.Errorf("unfenced %s, want %q", got, c.wantUnfenced)
			}
			if got := fmt.Sprint(bl.fenced); c.wantFenced == "" && len(bl.fenced) > 0 || c.wantFenced != "" && got != c.wantFenced {
				t.Errorf("fenced %s, want %q", got, c.wantFenced)
			}
			if events := r.drain(); hasEvent(events, "Warning FenceStateInvalid") != c.wantEvent {
				t.Errorf("events %q; want a FenceStateInvalid event: %v", events, c.wantEvent)
			}
			if c.recB != "" {
				got, _ := r.f.opts.Kube.CoreV1().ConfigMaps("ns").Get(ctx, r.f.state.name, metav1.GetOptions{})
				if got.Data["node-b"] != c.recB {
					t.Errorf("node-b's record rewritten: %q", got.Data["node-b"])
				}
			}
		})
	}
}
