package driver

import (
	"errors"
	"fmt"

	identitypb "github.com/csi-addons/spec/lib/go/identity"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/endpoint"
	"github.com/monoceph/monoceph/internal/fence"
	"github.com/monoceph/monoceph/internal/version"
)

// completeCSIAddons checks the csi-addons settings. Fencing is a controller service and
// reclaiming space an RBD one: a CephFS node given a csi-addons socket would serve nothing.
func (c *Config) completeCSIAddons() error {
	if c.CSIAddonsEndpoint == "" {
		return nil
	}
	if !c.RunsController() && c.Type != TypeRBD {
		return errors.New("--csi-addons-endpoint: a CephFS node serves no csi-addons service (network fencing runs with the controller, and CephFS has no space to reclaim): use --mode=controller or all, or drop the flag")
	}
	addons, err := endpoint.SocketPath(c.CSIAddonsEndpoint)
	if err != nil {
		return fmt.Errorf("--csi-addons-endpoint: %w", err)
	}
	if csi, _ := endpoint.SocketPath(c.Endpoint); csi == addons {
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
		Options: blocklist.Options{
			Expiry:              c.FenceExpiry,
			FallbackMaxPrefixV4: c.FenceFallbackMaxPrefixV4,
			FallbackMaxPrefixV6: c.FenceFallbackMaxPrefixV6,
		},
		ServeFenceClients: c.RunsNode(),
	}
}

// registerCSIAddons serves the csi-addons services on their own socket: FenceController
// with a controller, ReclaimSpace (offline: sparsify) and volume replication (RBD mirroring)
// with an RBD controller, ReclaimSpace (online: fstrim) and EncryptionKeyRotation with an RBD
// node, and the Identity advertising what was registered here. CephFS advertises
// no ReclaimSpace, as ceph-csi: a deleted file's objects are freed by the MDS at once, there
// is nothing to trim or sparsify, and csi-addons then schedules no reclaim for its volumes.
func (d *Driver) registerCSIAddons() {
	if d.addons == nil {
		return
	}
	var caps []*identitypb.Capability
	if d.cfg.RunsController() {
		fc := fence.NewServer(d.clusters, d.pool, d.cfg.fenceOptions())
		fence.Register(d.addons.Server, fc)
		caps = append(caps, fence.ServiceCapability(identitypb.Capability_Service_CONTROLLER_SERVICE))
		caps = append(caps, fc.Capabilities()...)
		if d.rbdController != nil {
			rs := d.rbdController.ReclaimSpace()
			rs.Register(d.addons.Server)
			caps = append(caps, rs.Capabilities()...)
			repl := d.rbdController.Replication()
			repl.Register(d.addons.Server)
			caps = append(caps, repl.Capabilities()...)
		}
	}
	if d.rbdNode != nil {
		rs := d.rbdNode.ReclaimSpace()
		rs.Register(d.addons.Server)
		caps = append(caps, fence.ServiceCapability(identitypb.Capability_Service_NODE_SERVICE))
		caps = append(caps, rs.Capabilities()...)
		kr := d.rbdNode.KeyRotation()
		kr.Register(d.addons.Server)
		caps = append(caps, kr.Capabilities()...)
	}
	fence.RegisterIdentity(d.addons.Server, fence.NewIdentity(d.cfg.DriverName, version.Get(), d.ready.Load, caps...))
}

// CSIAddonsSocketPath is where the csi-addons socket listens, or "".
func (d *Driver) CSIAddonsSocketPath() string {
	if d.addons == nil {
		return ""
	}
	return d.addons.Path()
}
