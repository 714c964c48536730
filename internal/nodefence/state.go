package nodefence

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Record is what the fencer did for one node, kept in the state ConfigMap under the node's
// name until the node is unfenced.
type Record struct {
	// Clusters are the fenced CIDRs per cluster ID of the cluster map.
	Clusters map[string]*ClusterRecord `json:"clusters"`
}

// ClusterRecord is the fence of one node on one cluster.
type ClusterRecord struct {
	// CIDRs are the node's client addresses (single-address prefixes), fenced or about to be.
	CIDRs []netip.Prefix `json:"cidrs"`
	// Preexisting are the CIDRs that were fenced already, by somebody else (a NetworkFence, an
	// operator), when this fencer first saw them: unfencing the node leaves them alone.
	Preexisting []netip.Prefix `json:"preexisting,omitempty"`
	// Refused says why the CIDRs were not fenced (they cover this controller or a monitor).
	Refused string `json:"refused,omitempty"`
}

// Unfence are the CIDRs unfencing removes: the fencer's own.
func (c *ClusterRecord) Unfence() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.CIDRs {
		if !slices.Contains(c.Preexisting, p) {
			out = append(out, p)
		}
	}
	return out
}

// add merges addrs into the record and returns the CIDRs it did not hold yet.
func (c *ClusterRecord) add(addrs []netip.Addr) []netip.Prefix {
	var added []netip.Prefix
	for _, a := range addrs {
		p := netip.PrefixFrom(a, a.BitLen())
		if !slices.Contains(c.CIDRs, p) {
			c.CIDRs = append(c.CIDRs, p)
			added = append(added, p)
		}
	}
	slices.SortFunc(c.CIDRs, netip.Prefix.Compare)
	return added
}

// store keeps the records in one ConfigMap the fencer owns (created on first use, not part of
// the Helm release: an upgrade must not reset it, and uninstalling the chart must not forget
// which fences to lift). Writes are optimistic (resourceVersion) and retried on conflict.
type store struct {
	kc              kubernetes.Interface
	namespace, name string
}

// get reads the ConfigMap and its records; a record that does not validate is in bad, not
// in recs (its raw value stays in the ConfigMap: save rewrites only the key it is given).
func (s *store) get(ctx context.Context) (cm *corev1.ConfigMap, recs map[string]*Record, bad map[string]error, err error) {
	cm, err = s.kc.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, map[string]*Record{}, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	recs, bad = map[string]*Record{}, map[string]error{}
	for node, raw := range cm.Data {
		r, err := decodeRecord(raw)
		if err != nil {
			bad[node] = &InvalidRecordError{ConfigMap: s.namespace + "/" + s.name, Node: node, Err: err}
			continue
		}
		recs[node] = r
	}
	return cm, recs, bad, nil
}

// all returns every record, and the nodes whose records are invalid.
func (s *store) all(ctx context.Context) (map[string]*Record, map[string]error, error) {
	_, recs, bad, err := s.get(ctx)
	return recs, bad, err
}

// load returns the record of node, or nil; an invalid record is an *InvalidRecordError.
func (s *store) load(ctx context.Context, node string) (*Record, error) {
	_, recs, bad, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	if err := bad[node]; err != nil {
		return nil, err
	}
	return recs[node], nil
}

// nodes lists the nodes with a record, valid or not.
func (s *store) nodes(ctx context.Context) ([]string, error) {
	recs, bad, err := s.all(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for n := range recs {
		out = append(out, n)
	}
	for n := range bad {
		out = append(out, n)
	}
	return out, nil
}

// save writes the record of node (nil deletes it).
func (s *store) save(ctx context.Context, node string, r *Record) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, _, _, err := s.get(ctx)
		if err != nil {
			return err
		}
		if cm == nil {
			if r == nil {
				return nil
			}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace,
				Labels: map[string]string{"app.kubernetes.io/component": "fencing", "app.kubernetes.io/managed-by": "monoceph"}}}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if r == nil {
			if _, ok := cm.Data[node]; !ok {
				return nil
			}
			delete(cm.Data, node)
		} else {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if cm.Data[node] == string(b) {
				return nil
			}
			cm.Data[node] = string(b)
		}
		if cm.ResourceVersion == "" {
			_, err = s.kc.CoreV1().ConfigMaps(s.namespace).Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), s.name, err)
			}
			return err
		}
		_, err = s.kc.CoreV1().ConfigMaps(s.namespace).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}
