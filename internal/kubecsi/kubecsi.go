// Package kubecsi is what a controller reads from the Kubernetes API when a CSI call carries too
// little: its own Ceph credentials, from a Secret, for publish calls without secrets and for
// fencing; and whether a node ID names a node of the cluster (its CSINode object).
package kubecsi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config loads the API server configuration: kubeconfig when given, else $KUBECONFIG, else
// the pod's service account.
func Config(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// SecretRef names a Secret: "<namespace>/<name>".
type SecretRef struct{ Namespace, Name string }

// ParseSecretRef reads "<namespace>/<name>".
func ParseSecretRef(s string) (SecretRef, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return SecretRef{}, fmt.Errorf("%q: want <namespace>/<name>", s)
	}
	return SecretRef{Namespace: ns, Name: name}, nil
}

func (r SecretRef) String() string { return r.Namespace + "/" + r.Name }

// Credentials reads Ceph credentials (userID, userKey) from a Secret through the API, by
// name, on every call: a rotated key is used at once, and the controller needs `get` on that
// one Secret only. The API server is not the controller's disk: the key never lands in a
// file, and nothing mounts the Secret into the pod.
type Credentials struct {
	kc  kubernetes.Interface
	ref SecretRef
	// Timeout bounds one read.
	Timeout time.Duration
}

// NewCredentials reads ref through kc.
func NewCredentials(kc kubernetes.Interface, ref SecretRef) *Credentials {
	return &Credentials{kc: kc, ref: ref, Timeout: 10 * time.Second}
}

// Secrets returns the Secret's data in the form CSI secrets take.
func (c *Credentials) Secrets(ctx context.Context) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	s, err := c.kc.CoreV1().Secrets(c.ref.Namespace).Get(ctx, c.ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", c.ref, err)
	}
	out := map[string]string{}
	for _, k := range []string{ceph.SecretUserID, ceph.SecretUserKey} {
		if v, ok := s.Data[k]; ok {
			out[k] = string(v)
		}
	}
	if _, err := ceph.CredentialsFromSecrets(out); err != nil {
		return nil, fmt.Errorf("the Secret %s: %w", c.ref, err)
	}
	return out, nil
}

// Cred is Secrets as ceph.Credentials.
func (c *Credentials) Cred(ctx context.Context) (ceph.Credentials, error) {
	s, err := c.Secrets(ctx)
	if err != nil {
		return ceph.Credentials{}, err
	}
	return ceph.CredentialsFromSecrets(s)
}

// CSINodes answers whether a node ID names a node where this driver's node plugin
// registered: the CSINode object of that name (the kubelet names it after the node, and the
// chart's node ID is the node name) lists the driver with that ID. The external-attacher finds
// node IDs the same way.
type CSINodes struct {
	kc     kubernetes.Interface
	driver string
}

// NewCSINodes looks nodes up through kc for driver.
func NewCSINodes(kc kubernetes.Interface, driver string) *CSINodes {
	return &CSINodes{kc: kc, driver: driver}
}

// NodeExists implements rbd.NodeChecker. The CSINode named like the node ID answers at once;
// a node ID that is not its node's name is looked for among all CSINodes.
func (n *CSINodes) NodeExists(ctx context.Context, nodeID string) (bool, error) {
	cn, err := n.kc.StorageV1().CSINodes().Get(ctx, nodeID, metav1.GetOptions{})
	switch {
	case err == nil && n.registers(cn, nodeID):
		return true, nil
	case err != nil && !apierrors.IsNotFound(err):
		return false, err
	}
	list, err := n.kc.StorageV1().CSINodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	for i := range list.Items {
		if n.registers(&list.Items[i], nodeID) {
			return true, nil
		}
	}
	return false, nil
}

func (n *CSINodes) registers(cn *storagev1.CSINode, nodeID string) bool {
	for _, d := range cn.Spec.Drivers {
		if d.Name == n.driver && d.NodeID == nodeID {
			return true
		}
	}
	return false
}

// OneNode knows a single node: an all-in-one process (controller and node service together)
// without a Kubernetes API, as the sanity suite and `make run` start it.
type OneNode string

// NodeExists implements rbd.NodeChecker.
func (n OneNode) NodeExists(_ context.Context, nodeID string) (bool, error) {
	return nodeID == string(n), nil
}

// Replaceable are the kinds ReplaceIfImmutable handles: cluster-scoped objects a chart owns
// whose spec Kubernetes mostly refuses to change (CSIDriver: attachRequired, podInfoOnMount,
// volumeLifecycleModes; StorageClass: parameters, provisioner, reclaimPolicy,
// volumeBindingMode).
var Replaceable = map[string]schema.GroupVersionResource{
	"CSIDriver":    {Group: "storage.k8s.io", Version: "v1", Resource: "csidrivers"},
	"StorageClass": {Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"},
}

// ReplaceIfImmutable prepares an upgrade to want (a kind of Replaceable): an installed object of
// that name whose immutable fields differ (the API server refuses a dry-run update to want as
// invalid) is deleted, so the upgrade can create want; one that differs in mutable fields only
// is left for the upgrade to update. It waits until the object is gone and reports whether it
// deleted it. Neither kind is needed by volumes in use: a missing CSIDriver makes Kubernetes
// assume attachment is required, a missing StorageClass only delays new claims. Only an object
// of the release upgraded is deleted (CheckOwner): objects are found by name, and a StorageClass
// or CSIDriver of that name may be another release's or an administrator's.
func ReplaceIfImmutable(ctx context.Context, dc dynamic.Interface, want *unstructured.Unstructured, release Release) (bool, error) {
	gvr, ok := Replaceable[want.GetKind()]
	if !ok {
		return false, fmt.Errorf("%s %s: not a kind this replaces", want.GetKind(), want.GetName())
	}
	api := dc.Resource(gvr)
	cur, err := api.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	next := cur.DeepCopy()
	for k := range cur.Object {
		if _, keep := want.Object[k]; !keep && !objectMeta[k] {
			delete(next.Object, k)
		}
	}
	for k, v := range want.Object {
		if !objectMeta[k] {
			next.Object[k] = v
		}
	}
	_, err = api.Update(ctx, next, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		return false, nil
	}
	if !apierrors.IsInvalid(err) {
		return false, fmt.Errorf("dry-run update of %s %s: %w", want.GetKind(), want.GetName(), err)
	}
	if err := CheckOwner(cur, release); err != nil {
		return false, err
	}
	uid := cur.GetUID()
	err = api.Delete(ctx, want.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting %s %s: %w", want.GetKind(), want.GetName(), err)
	}
	for {
		_, err := api.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		select {
		case <-ctx.Done():
			return true, fmt.Errorf("waiting for %s %s to go: %w", want.GetKind(), want.GetName(), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Release names a Helm release.
type Release struct{ Namespace, Name string }

func (r Release) String() string { return r.Namespace + "/" + r.Name }

// ParseRelease reads <namespace>/<name>.
func ParseRelease(s string) (Release, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Release{}, fmt.Errorf("release %q: want <namespace>/<name>", s)
	}
	return Release{Namespace: ns, Name: name}, nil
}

// The annotations Helm 3 puts on every object of a release.
const (
	helmReleaseName      = "meta.helm.sh/release-name"
	helmReleaseNamespace = "meta.helm.sh/release-namespace"
)

// CheckOwner refuses an object whose Helm annotations do not name release: another release's,
// or one no release installed. The error names the owner found.
func CheckOwner(o *unstructured.Unstructured, release Release) error {
	a := o.GetAnnotations()
	name, ns := a[helmReleaseName], a[helmReleaseNamespace]
	if name == release.Name && ns == release.Namespace && name != "" && ns != "" {
		return nil
	}
	owner := "no Helm release (no " + helmReleaseName + " and " + helmReleaseNamespace + " annotations)"
	if name != "" || ns != "" {
		owner = "Helm release " + ns + "/" + name
	}
	return fmt.Errorf("%s %s belongs to %s, not to release %s: not replacing it", o.GetKind(), o.GetName(), owner, release)
}

// objectMeta are the top-level fields that are not the object's content.
var objectMeta = map[string]bool{"apiVersion": true, "kind": true, "metadata": true, "status": true}
