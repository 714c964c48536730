package driver

import (
	"errors"
	"fmt"

	"github.com/monoceph/monoceph/internal/fence"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/version"
)

// completeCSIAddons checks the csi-addons settings. Fencing is a controller service: a
// node-only process given a csi-addons socket is misconfigured, not silently idle.
func (c *Config) completeCSIAddons() error {
	if c.CSIAddonsEndpoint == "" {
		return nil
	}
	if !c.RunsController() {
		return errors.New("--csi-addons-endpoint: the csi-addons services (network fencing) run with the controller: use --mode=controller or all, or drop the flag")
	}
	addons, err := server.SocketPath(c.CSIAddonsEndpoint)
	if err != nil {
		return fmt.Errorf("--csi-addons-endpoint: %w", err)
	}
	if csi, _ := server.SocketPath(c.Endpoint); csi == addons {
		return fmt.Errorf("--csi-addons-endpoint: %s is the CSI socket too; give it its own", addons)
	}
	if err := c.fenceOptions().Validate(); err != nil {
		return fmt.Errorf("--fence-*: %w", err)
	}
	return nil
}

// fenceOptions are the FenceController's settings. GetFenceClients answers with this
// process's own Ceph client address, which is the node's only where the node service runs too.
func (c Config) fenceOptions() fence.Options {
	return fence.Options{
		Expiry:              c.FenceExpiry,
		FallbackMaxPrefixV4: c.FenceFallbackMaxPrefixV4,
		FallbackMaxPrefixV6: c.FenceFallbackMaxPrefixV6,
		ServeFenceClients:   c.RunsNode(),
	}
}

// registerCSIAddons serves the csi-addons Identity and FenceController on their own socket.
func (d *Driver) registerCSIAddons() {
	if d.addons == nil {
		return
	}
	fc := fence.NewServer(d.clusters, d.pool, d.cfg.fenceOptions())
	fence.Register(d.addons.Server, fence.NewIdentity(d.cfg.DriverName, version.Get(), d.ready.Load, fc), fc)
}

// CSIAddonsSocketPath is where the csi-addons socket listens, or "".
func (d *Driver) CSIAddonsSocketPath() string {
	if d.addons == nil {
		return ""
	}
	return d.addons.Path()
}
