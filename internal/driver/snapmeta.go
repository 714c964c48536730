package driver

import (
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"github.com/monoceph/monoceph/internal/snapmeta"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// SnapshotMetadataConfig configures changed block tracking.
type SnapshotMetadataConfig struct {
	// BlockType is "variable" (default) or "fixed": see package snapmeta.
	BlockType string
	// MaxStreamDuration bounds every stream; 0 leaves it to the caller's deadline.
	MaxStreamDuration time.Duration
	// MaxConcurrentDiffs bounds the librbd diff iterations running at once (both APIs; 0:
	// snapmeta.DefaultMaxConcurrentDiffs).
	MaxConcurrentDiffs int
	// Limits bound the callers of the Kubernetes-facing API: streams in all and per user,
	// keepalive, connection age (zero fields: snapmeta's defaults).
	Limits snapmeta.Limits
	// NoReadCompare refuses deltas of ceph-csi snapshots that librbd cannot diff by snapshot
	// ID, instead of comparing their data (see package snapmeta).
	NoReadCompare bool

	// Address is where the Kubernetes-facing API listens (host:port, TLS); "" serves none.
	Address string
	// TLSCert and TLSKey are its key pair (PEM files, re-read when they change).
	TLSCert, TLSKey string
	// Audience is what callers' tokens must be issued for: the SnapshotMetadataService's
	// spec.audience.
	Audience string
	// Kubeconfig reaches the API server; "" means $KUBECONFIG or the pod's service account.
	Kubeconfig string
}

func (c *Config) completeSnapshotMetadata() error {
	sm := c.SnapshotMetadata
	if _, err := snapmeta.ParseStyle(sm.BlockType); err != nil {
		return fmt.Errorf("--snapshot-metadata-block-type: %w", err)
	}
	if sm.MaxStreamDuration < 0 {
		return fmt.Errorf("--snapshot-metadata-max-stream-duration=%v: must not be negative", sm.MaxStreamDuration)
	}
	for name, n := range map[string]int{"--snapshot-metadata-max-concurrent-diffs": sm.MaxConcurrentDiffs,
		"--snapshot-metadata-max-streams": sm.Limits.MaxStreams, "--snapshot-metadata-max-streams-per-user": sm.Limits.MaxStreamsPerUser} {
		if n < 0 {
			return fmt.Errorf("%s=%d: must not be negative", name, n)
		}
	}
	for name, d := range map[string]time.Duration{"--snapshot-metadata-keepalive-time": sm.Limits.KeepaliveTime,
		"--snapshot-metadata-keepalive-timeout": sm.Limits.KeepaliveTimeout, "--snapshot-metadata-max-connection-age": sm.Limits.MaxConnectionAge} {
		if d < 0 {
			return fmt.Errorf("%s=%v: must not be negative", name, d)
		}
	}
	if sm.Address == "" {
		return nil
	}
	switch {
	case c.Type != TypeRBD || !c.RunsController():
		return errors.New("--snapshot-metadata-address: changed block tracking is served by RBD controllers: use --type=rbd with --mode=controller or all, or drop the flag")
	case sm.TLSCert == "" || sm.TLSKey == "":
		return errors.New("--snapshot-metadata-address needs --snapshot-metadata-tls-cert and --snapshot-metadata-tls-key")
	case sm.Audience == "":
		return errors.New("--snapshot-metadata-address needs --snapshot-metadata-audience (the SnapshotMetadataService's spec.audience)")
	}
	return nil
}

// socketOptions are the CSI socket's extra server options: the changed block streams of RBD
// controllers are cut at --snapshot-metadata-max-stream-duration there too, at the transport,
// so that a client that stopped reading cannot hold a handler past it.
func (c Config) socketOptions() []grpc.ServerOption {
	if c.Type != TypeRBD || !c.RunsController() {
		return nil
	}
	return snapmeta.DeadlineOptions(c.SnapshotMetadata.MaxStreamDuration)
}

// registerSnapshotMetadata serves CSI SnapshotMetadata on the CSI socket (RBD controllers),
// and the Kubernetes-facing API on its TLS address when configured, both on one engine; it
// returns the capability that advertises the service.
func (d *Driver) registerSnapshotMetadata() (*csi.PluginCapability, error) {
	sm := d.cfg.SnapshotMetadata
	style, _ := snapmeta.ParseStyle(sm.BlockType) // checked by Complete
	engine := snapmeta.NewEngine(snapmeta.Options{
		Clusters: d.clusters, Pool: d.pool, Style: style, MaxStreamDuration: sm.MaxStreamDuration, MaxConcurrentDiffs: sm.MaxConcurrentDiffs,
		NoReadCompare: sm.NoReadCompare,
	})
	csi.RegisterSnapshotMetadataServer(d.grpc.Server, snapmeta.NewCSIServer(engine))
	if sm.Address != "" {
		kube, err := d.kubeAPI()
		if err != nil {
			return nil, fmt.Errorf("--snapshot-metadata-address: Kubernetes API: %w", err)
		}
		if d.snapTLS, err = snapmeta.NewTLSServer(sm.Address, sm.TLSCert, sm.TLSKey, snapmeta.NewKubeServer(engine, kube, sm.Limits), d.metrics); err != nil {
			return nil, fmt.Errorf("--snapshot-metadata-address: %w", err)
		}
	}
	return serviceCap(csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE), nil
}

// kubeAPI builds the clients that authenticate and authorize backup applications.
func (d *Driver) kubeAPI() (*snapmeta.APIServer, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = d.cfg.SnapshotMetadata.Kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	sc, err := snapclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &snapmeta.APIServer{Client: kc, Snapshots: sc, Audience: d.cfg.SnapshotMetadata.Audience, Driver: d.cfg.DriverName}, nil
}
