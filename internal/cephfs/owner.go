package cephfs

import (
	"context"
	"encoding/json"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/owner"
	"k8s.io/klog/v2"
)

// Ownership keys live in the volumes module's subvolume (and subvolume snapshot) metadata,
// where ceph-csi keeps them. `fs subvolume metadata` came with Quincy and was backported to
// Pacific 16.2.11 (go-ceph leaves its wrappers out under the pacific tag, so the commands are
// sent as JSON); an older manager lacks it, which its command table says, and then volumes are
// created without ownership rather than not at all.

// metadataSupportTTL is how long a manager's command table is trusted: managers get upgraded.
const metadataSupportTTL = 5 * time.Minute

// canSetMetadata reports whether the cluster's manager has `fs subvolume metadata set`.
func (c *Controller) canSetMetadata(ctx context.Context, clusterID string, s site) (bool, error) {
	c.metadata.mu.Lock()
	p, ok := c.metadata.known[clusterID]
	c.metadata.mu.Unlock()
	if ok && time.Since(p.at) < metadataSupportTTL {
		return p.ok, nil
	}
	table, err := c.mgr.CommandTable(ctx, s.mgr)
	if err != nil {
		return false, err
	}
	_, has := table.Find("fs", "subvolume", "metadata", "set")
	c.metadata.mu.Lock()
	if c.metadata.known == nil {
		c.metadata.known = map[string]supportProbe{}
	}
	c.metadata.known[clusterID] = supportProbe{ok: has, at: time.Now()}
	c.metadata.mu.Unlock()
	return has, nil
}

// setOwner writes ownership keys onto subvolume sub of group, or onto its snapshot snap when
// snap is not empty (see owner.Writes for overwrite). Existing keys are read first, so a retry
// writes nothing twice.
func (c *Controller) setOwner(ctx context.Context, clusterID string, s site, group, sub, snap string, want owner.Keys, overwrite bool) error {
	if len(want) == 0 {
		return nil
	}
	ok, err := c.canSetMetadata(ctx, clusterID, s)
	if err != nil {
		return err
	}
	if !ok {
		klog.FromContext(ctx).V(2).Info("Ownership not stored: the manager has no `fs subvolume metadata` (Ceph before 16.2.11)", "subvolume", sub)
		return nil
	}
	have, err := c.ownerOf(ctx, s, group, sub, snap)
	if err != nil {
		return err
	}
	w := owner.Writes(have, want, overwrite)
	for _, k := range w.Sorted() {
		cmd := metadataCmd("set", s.fs.Name, group, sub, snap)
		cmd["key_name"], cmd["value"] = k, w[k]
		if _, err := c.mgr.Command(ctx, s.mgr, cmd); err != nil {
			return ceph.Wrap("set metadata of "+sub, err)
		}
	}
	return nil
}

// ownerOf reads the metadata of a subvolume or snapshot (`metadata ls` answers a JSON object).
func (c *Controller) ownerOf(ctx context.Context, s site, group, sub, snap string) (owner.Keys, error) {
	out, err := c.mgr.Command(ctx, s.mgr, metadataCmd("ls", s.fs.Name, group, sub, snap))
	if err != nil {
		return nil, ceph.Wrap("list metadata of "+sub, err)
	}
	have := owner.Keys{}
	if len(out) == 0 {
		return have, nil
	}
	if err := json.Unmarshal(out, &have); err != nil {
		return nil, ceph.NewError("list metadata of "+sub, ceph.ErrInconsistent, err.Error())
	}
	return have, nil
}

func metadataCmd(op, fs, group, sub, snap string) map[string]any {
	cmd := map[string]any{"prefix": "fs subvolume metadata " + op, "vol_name": fs, "sub_name": sub, "group_name": group}
	if snap != "" {
		cmd["prefix"], cmd["snap_name"] = "fs subvolume snapshot metadata "+op, snap
	}
	return cmd
}
