package nodefence

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

// fakeBlocklist is one cluster's blocklist in memory.
type fakeBlocklist struct {
	entries  []netip.Prefix
	guardErr error
	fenced   []netip.Prefix // what Fence was asked for, all calls
	unfenced []netip.Prefix // what Unfence was asked for, all calls
}

func (b *fakeBlocklist) Guard(context.Context, []netip.Prefix) error { return b.guardErr }

func (b *fakeBlocklist) Present(_ context.Context, ps []netip.Prefix) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, p := range ps {
		if slices.Contains(b.entries, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

func (b *fakeBlocklist) Fence(_ context.Context, ps []netip.Prefix) (int, error) {
	n := 0
	for _, p := range ps {
		b.fenced = append(b.fenced, p)
		if !slices.Contains(b.entries, p) {
			b.entries = append(b.entries, p)
			n++
		}
	}
	return n, nil
}

func (b *fakeBlocklist) Unfence(_ context.Context, ps []netip.Prefix) (int, error) {
	n := 0
	for _, p := range ps {
		b.unfenced = append(b.unfenced, p)
		if i := slices.Index(b.entries, p); i >= 0 {
			b.entries = slices.Delete(b.entries, i, i+1)
			n++
		}
	}
	return n, nil
}

// fakeBackend finds the clients it is given.
type fakeBackend struct {
	clients map[string][]netip.Addr
	err     error
	cut     map[string][]netip.Addr
}

func (b *fakeBackend) Clients(context.Context, string) (map[string][]netip.Addr, error) {
	return b.clients, b.err
}

func (b *fakeBackend) Cut(_ context.Context, id, _ string, addrs []netip.Addr) error {
	if b.cut == nil {
		b.cut = map[string][]netip.Addr{}
	}
	b.cut[id] = append(b.cut[id], addrs...)
	return nil
}

func (*fakeBackend) Watch(informers.SharedInformerFactory, func(string)) {}

// fakeRig is a fencer on fakes: nodes in a lister, the state in a fake API, blocklists per
// cluster ID (a cluster without one is unreachable), events in a FakeRecorder.
type fakeRig struct {
	f      *Fencer
	bls    map[string]*fakeBlocklist
	events *record.FakeRecorder
	be     *fakeBackend
}

func newFakeRig(t *testing.T, be *fakeBackend, bls map[string]*fakeBlocklist, networks []netip.Prefix, nodes ...*corev1.Node) *fakeRig {
	t.Helper()
	f, err := New(Options{Kube: fakeKube(), Driver: "rbd.test", Namespace: "ns", Identity: "t", Backend: be,
		NodeNetworks: networks,
		Fencers: func(_ context.Context, id string) (Blocklist, func(), error) {
			if bl := bls[id]; bl != nil {
				return bl, func() {}, nil
			}
			return nil, nil, errors.New("cluster " + id + " unreachable")
		}})
	if err != nil {
		t.Fatal(err)
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	f.nodes = corelisters.NewNodeLister(idx)
	r := &fakeRig{f: f, bls: bls, events: record.NewFakeRecorder(100), be: be}
	f.events = r.events
	return r
}

// fakeKube is a fake API that sets resourceVersions, as the real one does (the state store
// tells a ConfigMap to create from one to update by it).
func fakeKube() *fake.Clientset {
	kc := fake.NewClientset()
	rv := 0
	kc.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if w, ok := a.(interface{ GetObject() runtime.Object }); ok {
			if o, ok := w.GetObject().(metav1.Object); ok {
				rv++
				o.SetResourceVersion(strconv.Itoa(rv))
			}
		}
		return false, nil, nil
	})
	return kc
}

// drain returns the events recorded so far, one string each ("Warning Reason message").
func (r *fakeRig) drain() []string {
	var out []string
	for {
		select {
		case e := <-r.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// testNode is a Node reporting addrs, tainted out-of-service or not.
func testNode(name string, isTainted bool, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if isTainted {
		n.Spec.Taints = []corev1.Taint{{Key: OutOfService, Effect: corev1.TaintEffectNoExecute}}
	}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
