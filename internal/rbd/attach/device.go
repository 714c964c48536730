package attach

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/mount-utils"
)

// DeviceSize is the size of a block device in bytes (BLKGETSIZE64).
func DeviceSize(dev string) (int64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var size uint64
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); errno != 0 {
		return 0, &os.PathError{Op: "ioctl BLKGETSIZE64", Path: dev, Err: errno}
	}
	return int64(size), nil
}

// MountInfoPath is the mount table read by MountAt.
const MountInfoPath = "/proc/self/mountinfo"

// MountAt returns the topmost mount whose mount point is path, or nil. It reads the mount
// table instead of stat'ing path, so it also works (and does not hang) on a FUSE mount whose
// daemon died.
func MountAt(path string) (*mount.MountInfo, error) {
	infos, err := mount.ParseMountInfo(MountInfoPath)
	if err != nil {
		return nil, err
	}
	path = filepath.Clean(path)
	var found *mount.MountInfo
	for i := range infos {
		if unescapeMountPath(infos[i].MountPoint) == path {
			found = &infos[i] // later lines are mounted on top of earlier ones
		}
	}
	return found, nil
}

// unescapeMountPath undoes the octal escapes the kernel writes into mountinfo for blanks and
// backslashes.
var mountPathUnescaper = strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)

func unescapeMountPath(p string) string { return mountPathUnescaper.Replace(p) }

// statWithin stats path, giving up when ctx ends. A stat on a FUSE mount blocks until the
// daemon answers, and a daemon still connecting to a hung cluster would otherwise block the
// caller (and the volume's lock) for as long.
func statWithin(ctx context.Context, path string) (os.FileInfo, error) {
	type result struct {
		fi  os.FileInfo
		err error
	}
	ch := make(chan result, 1) // the goroutine finishes on its own if nobody waits any more
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

// exists reports whether path exists; errors other than "does not exist" count as existing,
// so a caller never skips cleaning up something it merely could not stat.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
