package driver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs"
	cephfsmount "github.com/monoceph/monoceph/internal/cephfs/mount"
	cephfsnode "github.com/monoceph/monoceph/internal/cephfs/node"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/health"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/monoceph/monoceph/internal/nodefence"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/rbd"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	rbdnode "github.com/monoceph/monoceph/internal/rbd/node"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/snapmeta"
	"github.com/monoceph/monoceph/internal/version"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// Driver is one running monoceph process.
type Driver struct {
	cfg      Config
	kms      *kms.Config
	clusters *clustermap.Store
	pool     *ceph.Pool
	locks    *oplock.Locks
	registry *prometheus.Registry
	metrics  *server.Metrics
	health   *health.Checker

	// recover repairs broken FUSE mounts left by an earlier run, or reattaches the volumes a
	// mount holder serves (node modes)
	recover func(context.Context) error
	// holderClient talks to the mount holder (node modes with --mounter-endpoint)
	holderClient *mounter.Client
	holderGauges *holderGauges // what the node plugin found out about its holder
	// holder is this process as the mount holder (--mode=mounter)
	holder *mounter.Server

	grpc    *server.GRPC
	addons  *server.GRPC        // the csi-addons socket; nil when off
	snapTLS *snapmeta.TLSServer // the Kubernetes-facing snapshot metadata API; nil when off
	http    *server.HTTP
	ready   atomic.Bool

	// the RBD services the csi-addons socket serves ReclaimSpace of; nil when not running
	rbdController *rbd.Controller
	rbdNode       *rbdnode.Server

	kube   *kube             // Kubernetes API access of controllers (attach.go); nil when not needed
	fencer *nodefence.Fencer // out-of-service fencing; nil when off
}

// New validates cfg, loads the cluster map and opens the listeners, so every misconfiguration
// (a bad map, a busy port, an unwritable socket directory) is reported before serving.
func New(cfg Config) (*Driver, error) {
	if err := cfg.Complete(); err != nil {
		return nil, err
	}
	if cfg.Mode == ModeMounter {
		return newHolder(cfg)
	}
	clusters, err := clustermap.Load(cfg.ClusterConfig)
	if err != nil {
		return nil, err
	}
	kmsConfig, err := kms.Load(cfg.KMSConfig)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		cfg:      cfg,
		kms:      kmsConfig,
		clusters: clusters,
		locks:    oplock.New(),
		registry: server.NewRegistry(),
	}
	d.metrics = server.NewMetrics(d.registry)
	d.health = health.NewChecker(clusters.Map, cfg.HealthTimeout, d.registry)

	if cfg.MetricsAddress != "" {
		if d.http, err = server.NewHTTP(cfg.MetricsAddress, d.registry, d.health); err != nil {
			return nil, fmt.Errorf("--metrics-address: %w", err)
		}
	}
	if d.grpc, err = server.NewGRPC(cfg.Endpoint, d.metrics, cfg.socketOptions()...); err != nil {
		if d.http != nil {
			d.http.Shutdown(0)
		}
		return nil, fmt.Errorf("--endpoint: %w", err)
	}
	if cfg.CSIAddonsEndpoint != "" {
		if d.addons, err = server.NewGRPC(cfg.CSIAddonsEndpoint, d.metrics); err != nil {
			d.grpc.Shutdown(0)
			if d.http != nil {
				d.http.Shutdown(0)
			}
			return nil, fmt.Errorf("--csi-addons-endpoint: %w", err)
		}
	}
	d.pool = ceph.NewPool(ceph.PoolOptions{Timeouts: cfg.CephTimeouts, IdleTTL: cfg.ConnIdleTTL})
	if err := d.register(); err != nil {
		d.grpc.Shutdown(0)
		if d.addons != nil {
			d.addons.Shutdown(0)
		}
		if d.http != nil {
			d.http.Shutdown(0)
		}
		if d.holderGauges != nil { // its Event broadcaster may have started
			d.holderGauges.close()
		}
		d.pool.Close()
		return nil, err
	}
	d.registerCSIAddons()
	return d, nil
}

// register adds every service this type and mode serves. The Identity capabilities are
// derived from what was registered here, and nowhere else.
func (d *Driver) register() error {
	var caps []*csi.PluginCapability
	if d.cfg.Type == TypeRBD && d.cfg.RunsController() {
		o := rbd.Options{Clusters: d.clusters, Pool: d.pool, Locks: d.locks, MaxCloneDepth: d.cfg.RBDMaxCloneDepth,
			CephCSIInstanceID: d.cfg.CephCSIInstanceID, TopologyPrefix: rbd.TopologyPrefix(d.cfg.DriverName),
			ClusterName: d.cfg.ClusterName, KMS: d.kms}
		if err := d.rbdPublishOptions(&o); err != nil {
			return err
		}
		ctrl := rbd.NewController(o)
		d.rbdController = ctrl
		csi.RegisterControllerServer(d.grpc.Server, ctrl)
		caps = append(caps, serviceCap(csi.PluginCapability_Service_CONTROLLER_SERVICE),
			expansionCap(csi.PluginCapability_VolumeExpansion_ONLINE), d.registerGroupController(ctrl.Group()))
		smCap, err := d.registerSnapshotMetadata()
		if err != nil {
			return err
		}
		caps = append(caps, smCap)
	}
	if d.cfg.Type == TypeCephFS && d.cfg.RunsController() {
		ctrl := cephfs.NewController(cephfs.Options{
			Clusters: d.clusters, Pool: d.pool, Locks: d.locks, CloneWait: d.cfg.CephFSCloneWait,
			CephCSIInstanceID: d.cfg.CephCSIInstanceID, ClusterName: d.cfg.ClusterName,
		})
		csi.RegisterControllerServer(d.grpc.Server, ctrl)
		caps = append(caps, serviceCap(csi.PluginCapability_Service_CONTROLLER_SERVICE),
			expansionCap(csi.PluginCapability_VolumeExpansion_ONLINE), d.registerGroupController(ctrl.Group()))
	}
	if d.cfg.RunsNode() {
		ns, err := d.nodeServer()
		if err != nil {
			return err
		}
		csi.RegisterNodeServer(d.grpc.Server, ns)
	}
	if d.cfg.Type == TypeRBD && len(d.cfg.DomainLabels) > 0 {
		// only then: the external-provisioner refuses claims without topology from a driver
		// that advertises it
		caps = append(caps, serviceCap(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS))
	}
	csi.RegisterIdentityServer(d.grpc.Server, &identity{
		name: d.cfg.DriverName, version: version.Get(), caps: caps, ready: &d.ready,
	})
	var err error
	d.fencer, err = d.newFencer()
	return err
}

// nodeServer builds the node service of the configured type; its state lives under
// --state-dir, one directory per driver name so both drivers can share a node. With a mount
// holder, the FUSE mounts are the holder's.
func (d *Driver) nodeServer() (csi.NodeServer, error) {
	stateDir := d.cfg.NodeStateDir()
	op := d.cfg.CephTimeouts.Op
	if d.cfg.MounterEndpoint != "" {
		c, err := mounter.NewClient(d.cfg.MounterEndpoint)
		if err != nil {
			return nil, fmt.Errorf("--mounter-endpoint: %w", err)
		}
		d.holderClient = c
		d.holderGauges = newHolderGauges(d.registry)
	}
	switch d.cfg.Type {
	case TypeRBD:
		opts := rbdnode.Options{NodeID: d.cfg.NodeID, StateDir: stateDir, Clusters: d.clusters, Locks: d.locks,
			Timeout: op, FilesystemTimeout: d.cfg.NodeCommandTimeout, Pool: d.pool, KMS: d.kms}
		if d.cfg.ReadNodeLabels || len(d.cfg.DomainLabels) > 0 {
			labels, err := nodeLabels(d.cfg.SnapshotMetadata.Kubeconfig, d.cfg.NodeID, op)
			if err != nil {
				return nil, err
			}
			opts.NodeLabels = labels
			if opts.Topology, err = nodeTopology(labels, rbd.TopologyPrefix(d.cfg.DriverName), d.cfg.DomainLabels, op); err != nil {
				return nil, err
			}
		}
		if d.holderClient != nil {
			opts.FuseAttacher = d.holderClient.RBD(attach.NewFuse(hostexec.New(op), nil))
		}
		ns, err := rbdnode.New(opts)
		if err == nil {
			d.recover, d.rbdNode = ns.Recover, ns
		}
		return ns, err
	case TypeCephFS:
		resolver := &cephfs.CephCSIShallowResolver{Clusters: d.clusters, Pool: d.pool}
		opts := cephfsnode.Options{NodeID: d.cfg.NodeID, StateDir: stateDir, Clusters: d.clusters, Locks: d.locks, Timeout: op,
			ResolveCephCSIShallow: resolver.Snapshot}
		if d.holderClient != nil {
			opts.FuseMounter = d.holderClient.CephFS(cephfsmount.NewFuse(hostexec.New(op), op/2))
			// an older holder degrades fencing on this node: an Event on the Node says so
			d.holderGauges.reportToAPI(d.cfg.SnapshotMetadata.Kubeconfig, d.cfg.DriverName+"-node", d.cfg.NodeID)
		}
		ns, err := cephfsnode.New(opts)
		if err == nil {
			d.recover = ns.Recover
		}
		return ns, err
	}
	return nil, fmt.Errorf("--type=%s has no node service", d.cfg.Type)
}

// runRecover repairs or reattaches the node's volumes, for up to ten minutes.
func (d *Driver) runRecover(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := d.recover(rctx); err != nil {
		klog.ErrorS(err, "Repairing FUSE mounts from an earlier run failed")
	}
}

// SocketPath is where the CSI socket listens.
func (d *Driver) SocketPath() string {
	if d.holder != nil {
		return d.holder.Path()
	}
	return d.grpc.Path()
}

// MetricsAddr is the bound metrics address, or "".
func (d *Driver) MetricsAddr() string {
	if d.http == nil {
		return ""
	}
	return d.http.Addr()
}

// Run serves until ctx ends (SIGTERM), then stops gracefully: in-flight RPCs get
// ShutdownGrace to finish, the socket file is removed and Ceph connections are closed.
func (d *Driver) Run(ctx context.Context) error {
	if os.Getpid() == 1 {
		go reapOrphans(ctx)
	}
	if d.holder != nil {
		return d.runHolder(ctx)
	}
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	serve := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	serve("CSI gRPC server", d.grpc.Serve)
	if d.addons != nil {
		serve("csi-addons gRPC server", d.addons.Serve)
	}
	if d.http != nil {
		serve("metrics server", d.http.Serve)
	}
	if d.snapTLS != nil {
		serve("snapshot metadata TLS server", d.snapTLS.Serve)
	}
	if d.fencer != nil {
		wg.Add(1)
		go func() { defer wg.Done(); d.fencer.Run(ctx) }()
	}
	switch {
	case d.holderClient != nil:
		// whenever a holder appears (the first one this process sees, and each restarted
		// one), the volumes it serves are reattached: connections handed over both ways
		go d.holderClient.Watch(ctx, func(hctx context.Context, h mounter.Info) {
			d.holderGauges.observe(string(d.cfg.Type), version.Get(), h)
			klog.InfoS("Reattaching volumes through the mount holder", "holder", h.Instance, "holderVersion", h.Binary, "pid", h.PID)
			d.runRecover(hctx)
		})
	case d.recover != nil:
		// in the background: Probe must answer while mounts are repaired, and a CO that
		// publishes meanwhile repairs its own volume (the per-volume lock keeps them apart)
		go d.runRecover(ctx)
	}
	d.ready.Store(true)
	klog.InfoS("monoceph serving", "driver", d.cfg.DriverName, "version", version.Get(), "type", d.cfg.Type,
		"mode", d.cfg.Mode, "socket", d.grpc.Path(), "csiAddonsSocket", d.CSIAddonsSocketPath(), "metrics", d.MetricsAddr(), "clusters", len(d.clusters.Map()))

	var runErr error
	select {
	case <-ctx.Done():
		klog.InfoS("Shutting down", "grace", d.cfg.ShutdownGrace)
	case runErr = <-errs:
		klog.ErrorS(runErr, "Server failed, shutting down")
	}
	d.ready.Store(false)
	d.grpc.Shutdown(d.cfg.ShutdownGrace)
	if d.addons != nil {
		d.addons.Shutdown(d.cfg.ShutdownGrace)
	}
	if d.http != nil {
		d.http.Shutdown(d.cfg.ShutdownGrace)
	}
	if d.snapTLS != nil {
		d.snapTLS.Shutdown(d.cfg.ShutdownGrace)
	}
	wg.Wait()
	if d.holderGauges != nil {
		d.holderGauges.close()
	}
	d.pool.Close()
	klog.InfoS("Stopped")
	return runErr
}
