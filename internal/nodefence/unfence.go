package nodefence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/monoceph/monoceph/internal/faultpoint"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// Two nodes can share a fenced address (a NAT gateway, an address reused by a new machine):
// the first fenced made the entry, the second recorded it as pre-existing. Lifting the first
// node's taint must not lift the entry while the second stays fenced; the second then owns it,
// so that lifting its own taint does.

// keptFor are the prefixes of own that another node which stays fenced (tainted, or deleted)
// needs on a cluster, with that node's name; lift are the rest.
func keptFor(id string, own []netip.Prefix, others map[string]*Record, staysFenced func(node string) bool) (lift []netip.Prefix, kept map[netip.Prefix]string) {
	kept = map[netip.Prefix]string{}
	names := make([]string, 0, len(others))
	for n := range others {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, p := range own {
		for _, n := range names {
			cr := others[n].Clusters[id]
			if cr == nil || !staysFenced(n) {
				continue
			}
			if slices.ContainsFunc(cr.CIDRs, p.Overlaps) {
				kept[p] = n
				break
			}
		}
		if _, ok := kept[p]; !ok {
			lift = append(lift, p)
		}
	}
	return lift, kept
}

// staysFenced: a tainted node stays fenced, and so does one whose Node object is gone.
func (f *Fencer) staysFenced(name string) bool {
	n, err := f.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return true
	}
	return err != nil || tainted(n) // an error: assume the worst, keep the entry
}

// unfence removes the fencer's own entries of every cluster, except those another node that
// stays fenced needs and those NetworkFences fence now; then the record. With an invalid record
// of another node it does nothing: what that node needs cannot be told.
func (f *Fencer) unfence(ctx context.Context, node *corev1.Node, rec *Record) error {
	recs, bad, err := f.state.all(ctx)
	if err != nil {
		return err
	}
	delete(recs, node.Name)
	if len(bad) > 0 {
		var es []error
		for _, n := range sortedNames(bad) {
			es = append(es, bad[n])
		}
		err := fmt.Errorf("not unfencing: what other fenced nodes need is unknown: %w", errors.Join(es...))
		f.events.Eventf(node, corev1.EventTypeWarning, "FenceStateInvalid", "%s: %v", f.opts.Driver, err)
		return err
	}
	var errs []error
	for _, id := range sortedKeys(nil, rec) {
		cr := rec.Clusters[id]
		lift, kept := keptFor(id, cr.Unfence(), recs, f.staysFenced)
		if err := f.handOver(ctx, id, kept, recs); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", id, err))
			continue
		}
		if err := f.unfenceCluster(ctx, id, cr, lift); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", id, err))
			continue
		}
		faultpoint.Hit("nodefence.unfenced")
		delete(rec.Clusters, id)
		msg := fmt.Sprintf("%s: lifted the blocklist of the node's Ceph clients %v on cluster %s", f.opts.Driver, lift, id)
		if len(kept) > 0 {
			msg += "; kept " + keptList(kept) + ", still fenced for other nodes"
		}
		f.events.Event(node, corev1.EventTypeNormal, "Unfenced", msg)
	}
	if err := errors.Join(errs...); err != nil {
		_ = f.state.save(ctx, node.Name, rec) // what is done stays done
		return err
	}
	return f.state.save(ctx, node.Name, nil)
}

// handOver makes the nodes that keep an entry of this fencer its owners: it is no longer
// pre-existing for them, so unfencing them lifts it. Written before the unfencing node's
// record goes, so a fencer killed in between hands over again.
func (f *Fencer) handOver(ctx context.Context, id string, kept map[netip.Prefix]string, recs map[string]*Record) error {
	changed := map[string]bool{}
	for p, n := range kept {
		cr := recs[n].Clusters[id]
		if i := slices.Index(cr.Preexisting, p); i >= 0 {
			cr.Preexisting = slices.Delete(cr.Preexisting, i, i+1)
			changed[n] = true
		}
	}
	for _, n := range sortedNames(changed) {
		if err := f.state.save(ctx, n, recs[n]); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fencer) unfenceCluster(ctx context.Context, id string, cr *ClusterRecord, cidrs []netip.Prefix) error {
	if len(cidrs) == 0 || cr.Refused != "" {
		return nil
	}
	held, err := f.networkFenced(ctx, id)
	if err != nil {
		return err
	}
	cidrs = slices.DeleteFunc(slices.Clone(cidrs), func(p netip.Prefix) bool { return slices.Contains(held, p) })
	d, release, err := f.opts.Fencers(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	removed, err := d.Unfence(ctx, cidrs)
	if err == nil {
		klog.FromContext(ctx).Info("Unfenced node", "clusterID", id, "cidrs", cidrs, "entriesRemoved", removed, "keptForNetworkFences", held)
	}
	return err
}

func keptList(kept map[netip.Prefix]string) string {
	var s []string
	for p, n := range kept {
		s = append(s, fmt.Sprintf("%s (node %s)", p, n))
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
