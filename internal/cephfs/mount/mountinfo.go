package mount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"k8s.io/mount-utils"
)

// Filesystem types of CephFS mounts in the mount table.
const (
	FsTypeFuse   = "fuse.ceph-fuse"
	FsTypeKernel = "ceph"
)

// mountInfoPath is the mount table MountAt reads; tests point it elsewhere.
var mountInfoPath = "/proc/self/mountinfo"

// MountAt returns the topmost mount whose mount point is path, or nil. It reads the mount
// table instead of stat'ing path, so it neither fails nor hangs on a FUSE mount whose daemon
// died or stopped answering.
func MountAt(path string) (*mount.MountInfo, error) {
	infos, err := mount.ParseMountInfo(mountInfoPath)
	if err != nil {
		return nil, err
	}
	path = filepath.Clean(path)
	var found *mount.MountInfo
	for i := range infos {
		if unescapeOctal(infos[i].MountPoint) == path {
			found = &infos[i] // later lines are mounted on top of earlier ones
		}
	}
	return found, nil
}

// IsCephFS reports whether m is a ceph-fuse or kernel CephFS mount (or a bind mount of one).
func IsCephFS(m *mount.MountInfo) bool {
	return m != nil && (m.FsType == FsTypeFuse || m.FsType == FsTypeKernel)
}

// ReadOnly reports whether the mount point itself is read-only.
func ReadOnly(m *mount.MountInfo) bool { return m != nil && slices.Contains(m.MountOptions, "ro") }

// SameFilesystem reports whether two mounts show the same mounted filesystem instance: a
// remounted ceph-fuse gets a new device number, so a bind mount of the old one does not match.
func SameFilesystem(a, b *mount.MountInfo) bool {
	return a != nil && b != nil && a.Major == b.Major && a.Minor == b.Minor
}

// unescapeOctal undoes the \ooo escapes the kernel writes into mountinfo for blanks,
// backslashes and newlines in paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
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
// mount waits for the daemon, so it is bounded by timeout: a daemon that is alive but stuck is
// an error of class ceph.ErrUnavailable, not Broken, since remounting would leave it behind.
func Inspect(ctx context.Context, path string, timeout time.Duration) (State, *mount.MountInfo, error) {
	m, err := MountAt(path)
	if err != nil {
		return NotMounted, nil, fmt.Errorf("reading the mount table: %w", err)
	}
	if m == nil {
		return NotMounted, nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := statWithin(ctx, path); err != nil {
		if IsBroken(err) {
			return Broken, m, nil
		}
		if ctx.Err() != nil {
			return Healthy, m, ceph.NewError("stat "+path, ceph.ErrUnavailable, fmt.Sprintf("the mount does not answer within %s", timeout))
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

// statWithin stats path, giving up when ctx ends; the goroutine of a stat that never returns
// is left behind, a price paid only for a stuck daemon.
func statWithin(ctx context.Context, path string) (os.FileInfo, error) {
	type result struct {
		fi  os.FileInfo
		err error
	}
	ch := make(chan result, 1)
	go func() {
		fi, err := os.Stat(path)
		ch <- result{fi, err}
	}()
	select {
	case r := <-ch:
		return r.fi, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("stat %s: %w", path, ctx.Err())
	}
}

// maxStacked bounds how many mounts stacked on one path Unmount removes.
const maxStacked = 8

// Unmount unmounts path until nothing is mounted there (mounts may be stacked). A mount that
// refuses (busy, or a dead FUSE daemon the kernel still waits for) is detached lazily: the
// path is free at once and the kernel lets go when the last user does.
func Unmount(ctx context.Context, x Executor, path string) error {
	for range maxStacked {
		m, err := MountAt(path)
		if err != nil || m == nil {
			return err
		}
		if _, err := x.Run(ctx, "umount", path); err != nil {
			if _, lerr := x.Run(ctx, "umount", "-l", path); lerr != nil {
				return errors.Join(err, lerr)
			}
		}
	}
	return fmt.Errorf("%s is still mounted after %d unmounts", path, maxStacked)
}

// LazyUnmount detaches every mount stacked on path without waiting for its filesystem: the way
// to clear a broken FUSE mount, whose filesystem can no longer answer.
func LazyUnmount(ctx context.Context, x Executor, path string) error {
	for range maxStacked {
		m, err := MountAt(path)
		if err != nil || m == nil {
			return err
		}
		if _, err := x.Run(ctx, "umount", "-l", path); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s is still mounted after %d lazy unmounts", path, maxStacked)
}

// Bind bind-mounts source at target, read-only if asked. A bind mount takes the source's
// flags, so read-only needs the second step (remount,bind,ro), which changes the bind only;
// writes then fail with EROFS whatever the source allows.
func Bind(ctx context.Context, x Executor, source, target string, readOnly bool) error {
	if _, err := x.Run(ctx, "mount", "--bind", source, target); err != nil {
		return err
	}
	if !readOnly {
		return nil
	}
	if _, err := x.Run(ctx, "mount", "-o", "remount,bind,ro", target); err != nil {
		if _, uerr := x.Run(context.WithoutCancel(ctx), "umount", target); uerr != nil {
			return fmt.Errorf("%w (and undoing the bind mount: %v)", err, uerr)
		}
		return err
	}
	return nil
}
