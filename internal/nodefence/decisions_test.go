package nodefence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// countEvents counts the events of one type and reason ("Warning FenceRefused").
func countEvents(events []string, typeReason string) int {
	n := 0
	for _, e := range events {
		if strings.HasPrefix(e, typeReason+" ") {
			n++
		}
	}
	return n
}

// TestFenceRefusalsAndPreexisting: what the fencer does when the blocklist's guard refuses the
// node's addresses (they cover the controller or a daemon) and when they are fenced already,
// over successive reconciles of a tainted node-a at 10.0.0.5. A refusal is recorded and
// reported once, is not retried by the queue (reconcile succeeds), fences nothing and cuts
// nothing; once the guard lets it pass, the fence is made and the refusal forgotten. An entry
// that existed already is recorded as pre-existing, so that unfencing leaves it.
func TestFenceRefusalsAndPreexisting(t *testing.T) {
	refuse := errors.New("10.0.0.5/32 covers the controller's client address")
	for _, c := range []struct {
		name        string
		entries     []string // in the blocklist before
		guard       []error  // the guard's answer in each round; one reconcile per round
		wantEntries string
		wantCut     string // the addresses Backend.Cut was given, all rounds
		wantRefused string // the record's Refused afterwards
		wantPre     string // the record's Preexisting afterwards
		refusals    int    // FenceRefused events
		fenced      int    // Fenced events
	}{
		{name: "refused", guard: []error{refuse}, wantEntries: "[]", wantCut: "[]", wantRefused: refuse.Error(), wantPre: "[]", refusals: 1},
		{name: "refused twice, reported once", guard: []error{refuse, refuse}, wantEntries: "[]", wantCut: "[]",
			wantRefused: refuse.Error(), wantPre: "[]", refusals: 1},
		{name: "refused, then let pass", guard: []error{refuse, nil}, wantEntries: "[10.0.0.5/32]", wantCut: "[10.0.0.5]",
			wantPre: "[]", refusals: 1, fenced: 1},
		{name: "fenced", guard: []error{nil}, wantEntries: "[10.0.0.5/32]", wantCut: "[10.0.0.5]", wantPre: "[]", fenced: 1},
		{name: "fenced, then reconciled again: nothing new", guard: []error{nil, nil}, wantEntries: "[10.0.0.5/32]",
			wantCut: "[10.0.0.5 10.0.0.5]", wantPre: "[]", fenced: 1},
		{name: "fenced already by somebody else", entries: []string{"10.0.0.5/32"}, guard: []error{nil},
			wantEntries: "[10.0.0.5/32]", wantCut: "[10.0.0.5]", wantPre: "[10.0.0.5/32]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bl := &fakeBlocklist{entries: prefixes(c.entries...)}
			be := &fakeBackend{clients: map[string][]netip.Addr{"c1": addrs("10.0.0.5")}}
			r := newFakeRig(t, be, map[string]*fakeBlocklist{"c1": bl}, nil, testNode("node-a", true, "10.0.0.5"))
			ctx := context.Background()
			var events []string
			for i, g := range c.guard {
				bl.guardErr = g
				if err := r.f.reconcile(ctx, "node-a"); err != nil {
					t.Fatalf("round %d: reconcile: %v (a refusal is not retried by the queue)", i, err)
				}
				events = append(events, r.drain()...)
			}
			if got := fmt.Sprint(bl.entries); got != c.wantEntries {
				t.Errorf("blocklist %s, want %s", got, c.wantEntries)
			}
			if got := fmt.Sprint(be.cut["c1"]); got != c.wantCut {
				t.Errorf("cut %s, want %s", got, c.wantCut)
			}
			rec, err := r.f.state.load(ctx, "node-a")
			if err != nil || rec == nil || rec.Clusters["c1"] == nil {
				t.Fatalf("record %+v, %v; want one of cluster c1", rec, err)
			}
			cr := rec.Clusters["c1"]
			if cr.Refused != c.wantRefused {
				t.Errorf("recorded refusal %q, want %q", cr.Refused, c.wantRefused)
			}
			if got := fmt.Sprint(cr.Preexisting); got != c.wantPre {
				t.Errorf("pre-existing %s, want %s", got, c.wantPre)
			}
			if n := countEvents(events, "Warning FenceRefused"); n != c.refusals {
				t.Errorf("%d FenceRefused events, want %d: %q", n, c.refusals, events)
			}
			if c.refusals > 0 && !hasEvent(events, "Warning FenceRefused rbd.test: not fencing [10.0.0.5/32] on cluster c1: "+refuse.Error()) {
				t.Errorf("events %q, want a FenceRefused naming the CIDRs, the cluster and the refusal", events)
			}
			if n := countEvents(events, "Normal Fenced"); n != c.fenced {
				t.Errorf("%d Fenced events, want %d: %q", n, c.fenced, events)
			}
		})
	}
}

// networkFence is a csi-addons NetworkFence of cidrs on a cluster, in state (Fenced, Unfenced).
func networkFence(name, clusterID, state string, cidrs ...string) *unstructured.Unstructured {
	cs := make([]any, len(cidrs))
	for i, c := range cidrs {
		cs[i] = c
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": networkFences.GroupVersion().String(), "kind": "NetworkFence",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"fenceState": state, "cidrs": cs, "parameters": map[string]any{"clusterID": clusterID}},
	}}
}

// TestUnfenceLiftsOnlyItsOwn: when node-a (10.0.0.5, and 10.0.0.6 on the second cluster of
// some cases) leaves service, the fencer lifts the entries it made, and not those that were
// pre-existing, those a NetworkFence fences now, or any of a cluster whose fence was refused
// (nothing was made there). The record goes and an Unfenced event is reported per cluster.
func TestUnfenceLiftsOnlyItsOwn(t *testing.T) {
	own, other := "10.0.0.5/32", "10.0.0.6/32"
	for _, c := range []struct {
		name   string
		cr     ClusterRecord
		fences []runtime.Object // NetworkFences; nil with crdMissing: the CRD is not installed
		// crdMissing: listing NetworkFences answers NotFound, as without the csi-addons CRDs
		crdMissing bool
		want       string // what Unfence was asked to remove
	}{
		{name: "its own entries", cr: ClusterRecord{CIDRs: prefixes(own, other)}, want: "[" + own + " " + other + "]"},
		{name: "a pre-existing entry stays", cr: ClusterRecord{CIDRs: prefixes(own, other), Preexisting: prefixes(other)}, want: "[" + own + "]"},
		{name: "refused: nothing to lift", cr: ClusterRecord{CIDRs: prefixes(own), Refused: "covers a monitor"}, want: "[]"},
		{name: "a NetworkFence holds one", cr: ClusterRecord{CIDRs: prefixes(own, other)},
			fences: []runtime.Object{networkFence("nf", "c1", "Fenced", other)}, want: "[" + own + "]"},
		{name: "a NetworkFence of another cluster", cr: ClusterRecord{CIDRs: prefixes(own)},
			fences: []runtime.Object{networkFence("nf", "c2", "Fenced", own)}, want: "[" + own + "]"},
		{name: "a NetworkFence that is unfenced", cr: ClusterRecord{CIDRs: prefixes(own)},
			fences: []runtime.Object{networkFence("nf", "c1", "Unfenced", own)}, want: "[" + own + "]"},
		{name: "no NetworkFence CRD", cr: ClusterRecord{CIDRs: prefixes(own)}, crdMissing: true, want: "[" + own + "]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bl := &fakeBlocklist{entries: prefixes(own, other)}
			r := newFakeRig(t, &fakeBackend{}, map[string]*fakeBlocklist{"c1": bl}, nil, testNode("node-a", false, "10.0.0.5"))
			dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
				map[schema.GroupVersionResource]string{networkFences: "NetworkFenceList"}, c.fences...)
			if c.crdMissing {
				dc.PrependReactor("list", "networkfences", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewNotFound(networkFences.GroupResource(), "")
				})
			}
			r.f.opts.Dynamic = dc
			ctx := context.Background()
			cr := c.cr
			if err := r.f.state.save(ctx, "node-a", &Record{Clusters: map[string]*ClusterRecord{"c1": &cr}}); err != nil {
				t.Fatal(err)
			}
			if err := r.f.reconcile(ctx, "node-a"); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(bl.unfenced); got != c.want {
				t.Errorf("lifted %s, want %s", got, c.want)
			}
			if rec, err := r.f.state.load(ctx, "node-a"); err != nil || rec != nil {
				t.Errorf("record afterwards %+v, %v; want none", rec, err)
			}
			if events := r.drain(); countEvents(events, "Normal Unfenced") != 1 {
				t.Errorf("events %q, want one Unfenced", events)
			}
		})
	}
}
