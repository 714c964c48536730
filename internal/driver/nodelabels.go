package driver

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/monoceph/monoceph/internal/kubecsi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeLabelsTTL is how long the node's labels are reused: stages come in bursts, labels
// change rarely (a relabelled node's next stages see the change within this).
const nodeLabelsTTL = time.Minute

// nodeLabels returns a reader of the labels of the Node named nodeName through the Kubernetes
// API (--kubeconfig, else the pod's service account; the node plugin's role needs `get` on
// nodes). Each read is bounded by timeout; an answer is kept for nodeLabelsTTL.
func nodeLabels(kubeconfig, nodeName string, timeout time.Duration) (func(context.Context) (map[string]string, error), error) {
	cfg, err := kubecsi.Config(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--read-node-labels: Kubernetes API: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--read-node-labels: %w", err)
	}
	var (
		mu     sync.Mutex
		cached map[string]string
		at     time.Time
	)
	return func(ctx context.Context) (map[string]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if cached != nil && time.Since(at) < nodeLabelsTTL {
			return maps.Clone(cached), nil
		}
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		n, err := kc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading Node %q: %w", nodeName, err)
		}
		cached, at = n.Labels, time.Now()
		if cached == nil {
			cached = map[string]string{}
		}
		return maps.Clone(cached), nil
	}, nil
}

// nodeTopology is the node's topology for domainLabels: each label's value under the key
// prefix + the label's name after its last "/" (topology.kubernetes.io/zone=z1 is
// topology.<driver>/zone=z1, as ceph-csi's). Read once, at start-up: a node's topology
// must not change under its volumes. A missing label is an error, so a node that cannot say
// where it is does not serve (ceph-csi fails the same way).
func nodeTopology(labels func(context.Context) (map[string]string, error), prefix string, domainLabels []string, timeout time.Duration) (map[string]string, error) {
	if len(domainLabels) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := labels(ctx)
	if err != nil {
		return nil, fmt.Errorf("--domain-labels: %w", err)
	}
	return topologyOf(l, prefix, domainLabels)
}

func topologyOf(labels map[string]string, prefix string, domainLabels []string) (map[string]string, error) {
	t := map[string]string{}
	for _, d := range domainLabels {
		v, ok := labels[d]
		if !ok || v == "" {
			return nil, fmt.Errorf("--domain-labels: the node has no label %q", d)
		}
		t[prefix+d[strings.LastIndex(d, "/")+1:]] = v
	}
	return t, nil
}
