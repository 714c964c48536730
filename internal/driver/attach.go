package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/kubecsi"
	"github.com/monoceph/monoceph/internal/nodefence"
	"github.com/monoceph/monoceph/internal/rbd"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// AttachConfig configures what controllers read from the Kubernetes API: their own Ceph
// credentials and the automatic fencing of out-of-service nodes.
type AttachConfig struct {
	// ControllerSecret is "<namespace>/<name>" of a Secret with the controller's own Ceph
	// credentials (userID, userKey), read through the API for ControllerPublishVolume and
	// ControllerUnpublishVolume calls that carry no secrets, and for fencing.
	ControllerSecret string
	// FenceOutOfService fences nodes that get the node.kubernetes.io/out-of-service taint.
	FenceOutOfService bool
	// LeaderElectionNamespace holds the fencer's Lease and state ConfigMap (default: the pod's
	// namespace).
	LeaderElectionNamespace                   string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// FenceNodeNetworks are comma-separated CIDRs nodes reach Ceph from: an address there
	// counts as a tainted node's unless another Node reports it (nodefence.Options).
	FenceNodeNetworks string
}

// serviceAccountNamespace is where a pod finds its own namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func (c *Config) completeAttach() error {
	a := &c.Attach
	if a.ControllerSecret != "" {
		if !c.RunsController() {
			return errors.New("--controller-secret: only controllers publish and fence: use --mode=controller or all, or drop the flag")
		}
		if _, err := kubecsi.ParseSecretRef(a.ControllerSecret); err != nil {
			return fmt.Errorf("--controller-secret=%w", err)
		}
	}
	if !a.FenceOutOfService {
		if a.FenceNodeNetworks != "" {
			return errors.New("--fence-node-networks: only --fence-out-of-service uses it")
		}
		return nil
	}
	if _, err := nodefence.ParseNodeNetworks(a.FenceNodeNetworks); err != nil {
		return fmt.Errorf("--fence-node-networks: %w", err)
	}
	switch {
	case !c.RunsController():
		return errors.New("--fence-out-of-service: fencing runs with the controller: use --mode=controller or all")
	case a.ControllerSecret == "":
		return errors.New("--fence-out-of-service needs --controller-secret: fencing is asked for by no CSI call, so it brings no credentials")
	}
	if err := c.fenceOptions().Validate(); err != nil {
		return fmt.Errorf("--fence-*: %w", err)
	}
	if a.LeaderElectionNamespace == "" {
		a.LeaderElectionNamespace = os.Getenv("POD_NAMESPACE")
	}
	if a.LeaderElectionNamespace == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			a.LeaderElectionNamespace = strings.TrimSpace(string(b))
		}
	}
	if a.LeaderElectionNamespace == "" {
		return errors.New("--fence-out-of-service needs --leader-election-namespace (no pod namespace to default to)")
	}
	return nil
}

// kube is the API access of controllers that publish without secrets or fence.
type kube struct {
	client  kubernetes.Interface
	dynamic dynamic.Interface
	creds   *kubecsi.Credentials
}

func (d *Driver) kubeClients() (*kube, error) {
	a := d.cfg.Attach
	if a.ControllerSecret == "" {
		return nil, nil
	}
	cfg, err := kubecsi.Config(d.cfg.SnapshotMetadata.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--controller-secret: Kubernetes API: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ref, _ := kubecsi.ParseSecretRef(a.ControllerSecret) // checked by Complete
	return &kube{client: kc, dynamic: dc, creds: kubecsi.NewCredentials(kc, ref)}, nil
}

// rbdPublishOptions sets how RBD publishing finds credentials and nodes: with the API, the
// controller Secret and CSINode objects; an all-in-one process without it knows its own node.
func (d *Driver) rbdPublishOptions(o *rbd.Options) error {
	k, err := d.kubeClients()
	if err != nil {
		return err
	}
	switch {
	case k != nil:
		o.Secrets = k.creds.Secrets
		o.Nodes = kubecsi.NewCSINodes(k.client, d.cfg.DriverName)
	case d.cfg.RunsNode():
		o.Nodes = kubecsi.OneNode(d.cfg.NodeID)
	}
	d.kube = k
	return nil
}

// newFencer builds the out-of-service fencer of this driver's type, or nil when off.
func (d *Driver) newFencer() (*nodefence.Fencer, error) {
	a := d.cfg.Attach
	if !a.FenceOutOfService {
		return nil, nil
	}
	if d.kube == nil {
		k, err := d.kubeClients()
		if err != nil {
			return nil, err
		}
		d.kube = k
	}
	connect := func(ctx context.Context, clusterID string) (*ceph.Conn, error) {
		cl, err := d.clusters.Cluster(clusterID)
		if err != nil {
			return nil, err
		}
		cred, err := d.kube.creds.Cred(ctx)
		if err != nil {
			return nil, err
		}
		return d.pool.Get(ctx, cl.MonHost(), cred)
	}
	fencers := func(ctx context.Context, clusterID string) (nodefence.Blocklist, func(), error) {
		cl, err := d.clusters.Cluster(clusterID)
		if err != nil {
			return nil, nil, err
		}
		conn, err := connect(ctx, clusterID)
		if err != nil {
			return nil, nil, err
		}
		return blocklist.NewDirect(conn, cl, d.cfg.fenceOptions().Options), conn.Release, nil
	}
	networks, _ := nodefence.ParseNodeNetworks(a.FenceNodeNetworks) // checked by Complete
	var backend nodefence.Backend = &nodefence.RBD{Driver: d.cfg.DriverName, Connect: connect}
	if d.cfg.Type == TypeCephFS {
		backend = &nodefence.CephFS{Driver: d.cfg.DriverName, Kube: d.kube.client, Connect: connect, Clusters: func() []string {
			var ids []string
			for _, c := range d.clusters.Map() {
				ids = append(ids, c.ClusterID)
			}
			return ids
		}}
	}
	identity := os.Getenv("POD_NAME")
	if identity == "" {
		host, _ := os.Hostname()
		identity = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return nodefence.New(nodefence.Options{
		Kube: d.kube.client, Dynamic: d.kube.dynamic, Driver: d.cfg.DriverName, Namespace: a.LeaderElectionNamespace,
		Identity: identity, Backend: backend, Fencers: fencers, NodeNetworks: networks,
		LeaseDuration: a.LeaseDuration, RenewDeadline: a.RenewDeadline, RetryPeriod: a.RetryPeriod,
	})
}
