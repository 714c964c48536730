// Command monoceph is a Ceph CSI driver: RBD and CephFS volumes, network fencing and changed
// block tracking in one binary. Flags choose what a process serves.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs"
	"github.com/monoceph/monoceph/internal/driver"
	rbdnode "github.com/monoceph/monoceph/internal/rbd/node"
	"github.com/monoceph/monoceph/internal/snapmeta"
	"github.com/monoceph/monoceph/internal/version"
	"k8s.io/klog/v2"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (driver.Config, bool, error) {
	fs := flag.NewFlagSet("monoceph", flag.ContinueOnError)
	fs.SetOutput(stderr)
	klog.InitFlags(fs)
	var cfg driver.Config
	var typ, mode string
	fs.StringVar(&typ, "type", "", "storage backend: rbd or cephfs")
	fs.StringVar(&mode, "mode", string(driver.ModeAll), "what to run: the CSI services of controller, node or all; or mounter, the node's mount holder")
	fs.StringVar(&cfg.Endpoint, "endpoint", os.Getenv("CSI_ENDPOINT"), "CSI endpoint, unix:///path/to/csi.sock (default $CSI_ENDPOINT); in mounter mode the holder's socket (default unix:///<state-dir>/<driver name>/mounter.sock)")
	fs.StringVar(&cfg.NodeID, "nodeid", "", "this node's ID (required in node and all modes)")
	fs.StringVar(&cfg.DriverName, "drivername", "", "CSI driver name (default "+driver.DefaultRBDDriverName+" or "+driver.DefaultCephFSDriverName+")")
	fs.StringVar(&cfg.ClusterConfig, "cluster-config", "/etc/monoceph/clusters.json", "path of the cluster map (JSON)")
	fs.StringVar(&cfg.KMSConfig, "kms-config", "", "path of the KMS configuration of encrypted RBD volumes (JSON, ceph-csi's csi-kms-connection-details shape; empty: only the default provider)")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", "", "host:port for /metrics and /healthz (empty: off)")
	fs.DurationVar(&cfg.CephTimeouts.Connect, "ceph-connect-timeout", ceph.DefaultTimeouts.Connect, "bound on connecting to a Ceph cluster")
	fs.DurationVar(&cfg.CephTimeouts.Op, "ceph-op-timeout", ceph.DefaultTimeouts.Op, "bound on each Ceph OSD, monitor or manager operation")
	fs.DurationVar(&cfg.ConnIdleTTL, "conn-idle-ttl", 5*time.Minute, "close Ceph connections unused for this long")
	fs.DurationVar(&cfg.HealthTimeout, "health-timeout", 5*time.Second, "bound on one /healthz check")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 30*time.Second, "time in-flight RPCs get to finish after SIGTERM")
	fs.DurationVar(&cfg.NodeCommandTimeout, "node-command-timeout", rbdnode.DefaultFilesystemTimeout, "bound on each filesystem command of a node: mkfs, fsck, resize2fs, xfs_growfs")
	fs.StringVar(&cfg.MounterEndpoint, "mounter-endpoint", "", "the mount holder's socket, unix:///<state-dir>/<driver name>/mounter.sock (node and all modes; empty: FUSE mounts in this process)")
	fs.StringVar(&cfg.StateDir, "state-dir", "/run/monoceph", "node-private state: FUSE mount points, staging records, CephFS recovery keys (keep it on a tmpfs)")
	fs.IntVar(&cfg.RBDMaxCloneDepth, "rbd-max-clone-depth", 8, "flatten a new RBD clone whose parent chain is longer than this")
	fs.DurationVar(&cfg.CephFSCloneWait, "cephfs-clone-wait", cephfs.DefaultCloneWait, "how long CephFS CreateVolume waits for a clone before answering ABORTED so the CO retries")
	fs.BoolVar(&cfg.ReadNodeLabels, "read-node-labels", false, "node plugin: read this node's labels from its Node object (named --nodeid; RBAC: get nodes) for the cluster map's readAffinity.crushLocationLabels")
	fs.Func("domain-labels", "RBD: comma-separated node labels that make the node's topology (ceph-csi's --domainlabels), for StorageClasses with topologyConstrainedPools; set it on the controller and node plugins alike (the node reads its Node object, named --nodeid; RBAC: get nodes)", func(v string) error {
		for _, l := range strings.Split(v, ",") {
			if l = strings.TrimSpace(l); l != "" {
				cfg.DomainLabels = append(cfg.DomainLabels, l)
			}
		}
		return nil
	})
	fs.StringVar(&cfg.CephCSIInstanceID, "cephcsi-instance-id", "default", "the --instanceid of the ceph-csi deployment whose volumes this driver took over (the suffix of ceph-csi's journal objects)")
	fs.StringVar(&cfg.ClusterName, "cluster-name", "", "name of this Kubernetes cluster, stored on every image and subvolume created (csi.ceph.com/cluster/name, as ceph-csi's --clustername; empty: none)")
	fs.StringVar(&cfg.CSIAddonsEndpoint, "csi-addons-endpoint", "", "csi-addons endpoint, unix:///path/to/csi-addons.sock: network fencing (controller), ReclaimSpace (RBD controller and node) (empty: off)")
	fs.DurationVar(&cfg.FenceExpiry, "fence-expiry", blocklist.DefaultExpiry, "lifetime of the OSD blocklist entries a fence creates")
	fs.IntVar(&cfg.FenceFallbackMaxPrefixV4, "fence-fallback-max-prefix-v4", blocklist.DefaultFallbackMaxPrefixV4, "on monitors without range blocklisting, widest IPv4 range fenced address by address (16-32)")
	fs.IntVar(&cfg.FenceFallbackMaxPrefixV6, "fence-fallback-max-prefix-v6", blocklist.DefaultFallbackMaxPrefixV6, "on monitors without range blocklisting, widest IPv6 range fenced address by address (112-128)")
	fs.StringVar(&cfg.SnapshotMetadata.BlockType, "snapshot-metadata-block-type", "variable", "changed block tracking: variable (exact extents) or fixed (whole RADOS objects)")
	fs.DurationVar(&cfg.SnapshotMetadata.MaxStreamDuration, "snapshot-metadata-max-stream-duration", time.Hour, "bound on one changed block tracking stream (0: none)")
	fs.IntVar(&cfg.SnapshotMetadata.MaxConcurrentDiffs, "snapshot-metadata-max-concurrent-diffs", snapmeta.DefaultMaxConcurrentDiffs, "changed block tracking: librbd diff iterations running at once; further streams wait for a turn")
	fs.IntVar(&cfg.SnapshotMetadata.Limits.MaxStreams, "snapshot-metadata-max-streams", snapmeta.DefaultMaxStreams, "streams of the Kubernetes-facing SnapshotMetadata API open at once; more get RESOURCE_EXHAUSTED")
	fs.IntVar(&cfg.SnapshotMetadata.Limits.MaxStreamsPerUser, "snapshot-metadata-max-streams-per-user", snapmeta.DefaultMaxStreamsPerUser, "of those, streams one authenticated user may hold")
	fs.DurationVar(&cfg.SnapshotMetadata.Limits.KeepaliveTime, "snapshot-metadata-keepalive-time", snapmeta.DefaultKeepaliveTime, "ping a connection of that API silent this long")
	fs.DurationVar(&cfg.SnapshotMetadata.Limits.KeepaliveTimeout, "snapshot-metadata-keepalive-timeout", snapmeta.DefaultKeepaliveTimeout, "close it when the ping goes unanswered this long")
	fs.DurationVar(&cfg.SnapshotMetadata.Limits.MaxConnectionAge, "snapshot-metadata-max-connection-age", snapmeta.DefaultMaxConnectionAge, "ask a connection of that API to go away at this age; its streams get --snapshot-metadata-max-stream-duration to finish")
	readCompare := fs.Bool("snapshot-metadata-read-compare", true, "changed blocks between two of ceph-csi's snapshots where librbd cannot diff them by snapshot ID (Ceph before Reef 18.2.5): compare their data (false: answer FAILED_PRECONDITION)")
	fs.StringVar(&cfg.SnapshotMetadata.Address, "snapshot-metadata-address", "", "host:port of the Kubernetes-facing SnapshotMetadata API for backup applications, TLS (empty: off)")
	fs.StringVar(&cfg.SnapshotMetadata.TLSCert, "snapshot-metadata-tls-cert", "", "its TLS certificate (PEM), re-read when it changes")
	fs.StringVar(&cfg.SnapshotMetadata.TLSKey, "snapshot-metadata-tls-key", "", "its TLS private key (PEM)")
	fs.StringVar(&cfg.SnapshotMetadata.Audience, "snapshot-metadata-audience", "", "audience callers' tokens must carry (the SnapshotMetadataService's spec.audience)")
	fs.StringVar(&cfg.SnapshotMetadata.Kubeconfig, "kubeconfig", "", "kubeconfig for the Kubernetes API (default $KUBECONFIG or the pod's service account)")
	fs.StringVar(&cfg.Attach.ControllerSecret, "controller-secret", "", "<namespace>/<name> of a Secret with the controller's own Ceph user (userID, userKey), read through the Kubernetes API for ControllerPublish/Unpublish calls without secrets and for fencing; controller and all modes")
	fs.BoolVar(&cfg.Attach.FenceOutOfService, "fence-out-of-service", false, "blocklist the Ceph clients of nodes tainted node.kubernetes.io/out-of-service (and evict their CephFS sessions), and lift that when the taint goes; needs --controller-secret")
	fs.StringVar(&cfg.Attach.FenceNodeNetworks, "fence-node-networks", "", "comma-separated CIDRs nodes reach Ceph from: out-of-service fencing takes an address there as the tainted node's unless another Node reports it (default: only the addresses the Node reports)")
	fs.StringVar(&cfg.Attach.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the fencer's Lease and state ConfigMap (default: the pod's)")
	fs.DurationVar(&cfg.Attach.LeaseDuration, "leader-election-lease-duration", 137*time.Second, "fencer leader election: lease duration")
	fs.DurationVar(&cfg.Attach.RenewDeadline, "leader-election-renew-deadline", 107*time.Second, "fencer leader election: renew deadline")
	fs.DurationVar(&cfg.Attach.RetryPeriod, "leader-election-retry-period", 26*time.Second, "fencer leader election: retry period")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.Type, cfg.Mode = driver.Type(typ), driver.Mode(mode)
	cfg.SnapshotMetadata.NoReadCompare = !*readCompare
	return cfg, *showVersion, nil
}

// run is main without os.Exit, so tests can drive it. Every misconfiguration ends here with
// one line on stderr and a non-zero code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "changed-blocks" {
		return changedBlocks(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "inventory" {
		return inventoryCmd(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "replace-immutable" {
		return replaceImmutable(args[1:], stdout, stderr)
	}
	cfg, showVersion, err := parseFlags(args, stderr)
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "monoceph: %v\n", err)
		return 2
	}
	if showVersion {
		fmt.Fprintln(stdout, "monoceph", version.Get())
		return 0
	}
	defer klog.Flush()

	d, err := driver.New(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "monoceph: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := d.Run(ctx); err != nil {
		fmt.Fprintf(stderr, "monoceph: %v\n", err)
		return 1
	}
	return 0
}
