package mount

import (
	"context"

	"github.com/monoceph/monoceph/internal/ceph"
)

// Mounter names, as the volume context's mounter key spells them.
const (
	NameFuse   = "fuse"
	NameKernel = "kernel"
)

// Request is one CephFS mount.
type Request struct {
	// Monitors are the cluster map's monitor entries ("host", "host:port" or an address
	// vector).
	Monitors []string
	FSName   string
	// Path is the directory inside the filesystem to mount, e.g. /volumes/<group>/<sub>/<uuid>.
	Path     string
	Target   string
	ReadOnly bool
	// Options are checked by the mounter's ParseOptions.
	Options []string
	Cred    ceph.Credentials
	// WorkDir is a private (0700) directory the mount owns for its lifetime: key files while
	// the helper runs, and ceph-fuse's admin socket, log and configuration.
	WorkDir string
	// Node is the ID of the node mounting. ceph-fuse announces it in its MDS session metadata
	// (NodeMetadataKey), where fencing a lost node finds that node's sessions; kernel clients
	// are found by the hostname they announce.
	Node string
}

// NodeMetadataKey is the MDS session metadata key holding the node ID of a ceph-fuse mount.
const NodeMetadataKey = "monoceph.node"

// Mounter mounts CephFS one way.
type Mounter interface {
	// Name is NameFuse or NameKernel.
	Name() string
	// Available returns an *UnavailableError when this node cannot mount this way.
	Available(ctx context.Context) error
	// ParseOptions checks the volume's options for this mounter and the capability's mount
	// flags, and returns the items to mount with.
	ParseOptions(volumeOptions string, mountFlags []string) ([]string, error)
	// Mount mounts r.Path at r.Target. On failure nothing is left mounted or running.
	Mount(ctx context.Context, r Request) error
	// Release makes sure nothing the mount started outlives it once r.Target is unmounted
	// (ceph-fuse's daemon). The files it keeps in workDir stay for the caller to remove.
	Release(ctx context.Context, workDir string) error
	// Running reports whether something a mount of workDir started still runs (a ceph-fuse
	// daemon), so its directory must stay.
	Running(ctx context.Context, workDir string) (bool, error)
}
