package driver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/monoceph/monoceph/internal/ceph"
	cephfsmount "github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/mounter"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/version"
	"k8s.io/klog/v2"
)

// newHolder builds the mount holder of --mode=mounter: the mounters of its type and the
// socket the node plugin talks to. It takes the holder lock, waiting for a predecessor that is
// still handing over.
func newHolder(cfg Config) (*Driver, error) {
	d := &Driver{cfg: cfg, registry: server.NewRegistry()}
	op := cfg.CephTimeouts.Op
	opts := mounter.ServerOptions{Endpoint: cfg.Endpoint, Type: string(cfg.Type), StateDir: cfg.NodeStateDir(), Binary: version.Get()}
	switch cfg.Type {
	case TypeRBD:
		d.pool = ceph.NewPool(ceph.PoolOptions{Timeouts: cfg.CephTimeouts, IdleTTL: cfg.ConnIdleTTL})
		opts.RBD = attach.NewFuse(hostexec.New(op), d.pool)
		opts.RBD.ConnectTimeout = max(op/2, cfg.CephTimeouts.Connect)
	case TypeCephFS:
		opts.CephFS = cephfsmount.NewFuse(hostexec.New(op), op/2)
	}
	if err := os.MkdirAll(cfg.NodeStateDir(), 0o700); err != nil {
		return nil, fmt.Errorf("--state-dir: %w", err)
	}
	// no deadline: a successor waits as long as its predecessor hands over (a SIGTERM stops
	// the wait)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h, err := mounter.Listen(ctx, opts)
	if err != nil {
		if d.pool != nil {
			d.pool.Close()
		}
		return nil, fmt.Errorf("mount holder: %w", err)
	}
	d.holder = h
	if cfg.MetricsAddress != "" {
		// /healthz: the holder answers on its socket
		healthz := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := mounter.NewClient(cfg.Endpoint)
			if err == nil {
				_, err = c.Hello(r.Context())
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte("ok: the mount holder answers\n"))
		})
		if d.http, err = server.NewHTTP(cfg.MetricsAddress, d.registry, healthz); err != nil {
			h.Shutdown(0)
			return nil, fmt.Errorf("--metrics-address: %w", err)
		}
	}
	return d, nil
}

// runHolder serves as the mount holder until ctx ends (SIGTERM), then hands over: requests in
// flight get --shutdown-grace, the RBD image servers stop after answering theirs (the node
// plugin keeps their connections), ceph-fuse daemons are asked to exit.
func (d *Driver) runHolder(ctx context.Context) error {
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.holder.Serve(); err != nil {
			errs <- fmt.Errorf("mount holder: %w", err)
		}
	})
	if d.http != nil {
		wg.Go(func() {
			if err := d.http.Serve(); err != nil {
				errs <- fmt.Errorf("metrics server: %w", err)
			}
		})
	}
	klog.InfoS("monoceph mount holder serving", "version", version.Get(), "type", d.cfg.Type, "socket", d.holder.Path(),
		"instance", d.holder.Instance(), "metrics", d.MetricsAddr())
	var runErr error
	select {
	case <-ctx.Done():
		klog.InfoS("Mount holder shutting down", "grace", d.cfg.ShutdownGrace)
	case runErr = <-errs:
		klog.ErrorS(runErr, "Mount holder failed, shutting down")
	}
	d.holder.Shutdown(d.cfg.ShutdownGrace)
	if d.http != nil {
		d.http.Shutdown(d.cfg.ShutdownGrace)
	}
	wg.Wait()
	if d.pool != nil {
		d.pool.Close()
	}
	klog.InfoS("Stopped")
	return runErr
}

// reapOrphans waits for the orphans this process inherits as the first process of its PID
// namespace (a container's entrypoint), such as the FUSE daemons mount helpers leave behind,
// whenever a child exits.
func reapOrphans(ctx context.Context) {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			hostexec.ReapOrphans("/proc")
		}
	}
}
