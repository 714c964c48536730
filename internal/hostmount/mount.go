package hostmount

import (
	"context"
	"errors"
	"fmt"

	"github.com/monoceph/monoceph/internal/hostexec"
)

// MaxStacked bounds how many mounts stacked on one path the unmount functions remove: a CephFS
// target gets one more for each FUSE daemon that died under it (see the CephFS node's repair).
const MaxStacked = 32

// Unmount unmounts path until nothing is mounted there (mounts may be stacked); it stops at the
// first umount that fails.
func Unmount(ctx context.Context, x hostexec.Executor, path string) error {
	return unmountStacked(path, "unmounts", func() error {
		_, err := x.Run(ctx, "umount", path)
		return err
	})
}

// UnmountOrDetach unmounts path until nothing is mounted there. A mount that refuses (busy, or
// a dead FUSE daemon the kernel still waits for) is detached lazily: the path is free at once
// and the kernel lets go when the last user does.
func UnmountOrDetach(ctx context.Context, x hostexec.Executor, path string) error {
	return unmountStacked(path, "unmounts", func() error {
		if _, err := x.Run(ctx, "umount", path); err != nil {
			if _, lerr := x.Run(ctx, "umount", "-l", path); lerr != nil {
				return errors.Join(err, lerr)
			}
		}
		return nil
	})
}

// LazyUnmount detaches every mount stacked on path without waiting for its filesystem: the way
// to clear a broken FUSE mount, whose filesystem can no longer answer.
func LazyUnmount(ctx context.Context, x hostexec.Executor, path string) error {
	return unmountStacked(path, "lazy unmounts", func() error {
		_, err := x.Run(ctx, "umount", "-l", path)
		return err
	})
}

// unmountStacked calls unmount while something is mounted at path, at most MaxStacked times.
func unmountStacked(path, what string, unmount func() error) error {
	for range MaxStacked {
		m, err := MountAt(path)
		if err != nil || m == nil {
			return err
		}
		if err := unmount(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s is still mounted after %d %s", path, MaxStacked, what)
}

// Bind bind-mounts source at target, read-only if asked. A bind mount takes the source's
// flags, and mount(8) cannot make a bind read-only in one step on every version, so read-only
// needs the second step (remount,bind,ro), which changes the bind only; writes then fail with
// EROFS whatever the source allows. A bind that cannot be made read-only is undone.
func Bind(ctx context.Context, x hostexec.Executor, source, target string, readOnly bool) error {
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
