package mount

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/hostmount"
	"k8s.io/mount-utils"
)

// Filesystem types of CephFS mounts in the mount table.
const (
	FsTypeFuse   = "fuse.ceph-fuse"
	FsTypeKernel = "ceph"
)

// IsCephFS reports whether m is a ceph-fuse or kernel CephFS mount (or a bind mount of one).
func IsCephFS(m *mount.MountInfo) bool {
	return m != nil && (m.FsType == FsTypeFuse || m.FsType == FsTypeKernel)
}

// State is what Inspect finds at a path.
type State int

const (
	// NotMounted: nothing is mounted at the path.
	NotMounted State = iota
	// Healthy: mounted and answering.
	Healthy
	// Broken: mounted, but the filesystem behind it is gone, typically a FUSE mount whose daemon
	// died ("Transport endpoint is not connected"). Only unmounting clears it.
	Broken
)

func (s State) String() string {
	return [...]string{"not mounted", "healthy", "broken"}[s]
}

// Inspect reports the state of the mount at path and its mount table entry. A stat on a FUSE
// mount waits for the daemon, so it is bounded by timeout, and while one waits no other starts
// on the path (hostmount.StatWithin): a daemon that is alive but stuck is an error of class
// ceph.ErrUnavailable, not Broken, since remounting would leave it behind.
func Inspect(ctx context.Context, path string, timeout time.Duration) (State, *mount.MountInfo, error) {
	m, err := hostmount.MountAt(path)
	if err != nil {
		return NotMounted, nil, fmt.Errorf("reading the mount table: %w", err)
	}
	if m == nil {
		return NotMounted, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := hostmount.StatWithin(ctx, path); err != nil {
		if IsBroken(err) {
			return Broken, m, nil
		}
		if hostmount.Unresponsive(err) {
			return Healthy, m, ceph.NewError("stat "+path, ceph.ErrUnavailable, fmt.Sprintf("the mount does not answer (%s): %v", timeout, err))
		}
		return Healthy, m, err
	}
	return Healthy, m, nil
}

// IsBroken reports whether err, from a file operation, says the filesystem behind a mount is
// gone: ENOTCONN from a FUSE mount whose daemon died (ECONNABORTED for a request the death
// caught in flight, which mount-utils does not list), ESTALE, EIO...
func IsBroken(err error) bool {
	return mount.IsCorruptedMnt(err) || errors.Is(err, syscall.ECONNABORTED)
}
