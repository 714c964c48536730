package mounter

import (
	"context"

	"github.com/monoceph/monoceph/internal/cephfs/mount"
)

// CephFS is the fuse mounter of a CephFS node plugin whose ceph-fuse daemons run in the holder.
// What needs no daemon (availability, options) is answered here by local, the same mounter.
func (c *Client) CephFS(local *mount.Fuse) mount.Mounter { return &cephfsMounter{c: c, local: local} }

type cephfsMounter struct {
	c     *Client
	local *mount.Fuse
}

func (m *cephfsMounter) Name() string { return m.local.Name() }

func (m *cephfsMounter) Available(ctx context.Context) error { return m.local.Available(ctx) }

func (m *cephfsMounter) ParseOptions(volumeOptions string, mountFlags []string) ([]string, error) {
	return m.local.ParseOptions(volumeOptions, mountFlags)
}

func (m *cephfsMounter) Mount(ctx context.Context, r mount.Request) error {
	_, err := m.c.call(ctx, opCephFSMount, cephfsMount{Monitors: r.Monitors, FSName: r.FSName, Path: r.Path, Target: r.Target,
		ReadOnly: r.ReadOnly, Options: r.Options, Cred: wireCred(r.Cred), WorkDir: r.WorkDir, Node: r.Node}, nil, nil, false)
	return err
}

func (m *cephfsMounter) Release(ctx context.Context, workDir string) error {
	_, err := m.c.call(ctx, opCephFSRelease, workDirBody{WorkDir: workDir}, nil, nil, false)
	return err
}

func (m *cephfsMounter) Running(ctx context.Context, dir string) (bool, error) {
	var r running
	_, err := m.c.call(ctx, opCephFSRunning, workDirBody{WorkDir: dir}, nil, &r, false)
	return r.Running, err
}
