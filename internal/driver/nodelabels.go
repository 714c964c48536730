package driver

import (
	"context"
	"fmt"
	"maps"
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
