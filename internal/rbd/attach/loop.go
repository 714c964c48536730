package attach

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"golang.org/x/sys/unix"
)

// loop devices are driven with losetup (util-linux) and inspected through sysfs and
// LOOP_GET_STATUS64, which need no command.

// loopsNamed lists the loop devices whose backing file has the base name name, in sysfs order.
// The kernel names a backing file by its path as seen from the namespace it was opened in;
// once that is gone (a container ended), by its path inside its own file system: the base
// name is what stays. Only sysfs is read, never the file.
func loopsNamed(sys, name string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(sys, "block", "loop*", "loop", "backing_file"))
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // detached while we looked
		}
		if filepath.Base(strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")) == name {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return devs, nil
}

// loopReadsInode reports whether dev's backing file is inode ino of the file system with
// device number major:minor. The kernel asks the file's file system for the answer, a FUSE
// server that may not answer: the wait is bounded by ctx and loopStatusTimeout.
func loopReadsInode(ctx context.Context, dev string, major, minor uint32, ino uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, loopStatusTimeout)
	defer cancel()
	type result struct {
		info *unix.LoopInfo64
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		info, err := loopStatus(dev)
		ch <- result{info, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return false, r.err
		}
		return r.info.Device == unix.Mkdev(major, minor) && r.info.Inode == ino, nil
	case <-ctx.Done():
		return false, fmt.Errorf("loop device %s: the server of its file does not answer: %w", dev, ctx.Err())
	}
}

// loopStatusTimeout bounds loopReadsInode.
const loopStatusTimeout = 10 * time.Second

func loopStatus(dev string) (*unix.LoopInfo64, error) {
	f, err := os.Open(dev)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		return nil, &os.PathError{Op: "ioctl LOOP_GET_STATUS64", Path: dev, Err: err}
	}
	return info, nil
}

// loopBacking is the backing file name of a loop device, "" when the device is not set up.
func loopBacking(sys, dev string) string {
	b, err := os.ReadFile(filepath.Join(sys, "block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), " (deleted)")
}

// loopReadOnly reports whether a block device is read-only.
func loopReadOnly(sys, dev string) bool {
	b, err := os.ReadFile(filepath.Join(sys, "block", filepath.Base(dev), "ro"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// loopReads reports whether dev reads the very file now at path (same device and inode), not
// just a file of that name: a loop device set up on an earlier FUSE mount of the same
// directory still names it, but reads a file whose connection is gone.
func loopReads(ctx context.Context, dev, path string) error {
	fi, err := hostmount.StatWithin(ctx, path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("stat %s: no device and inode", path)
	}
	info, err := loopStatus(dev)
	if err != nil {
		return err
	}
	if info.Device != st.Dev || info.Inode != st.Ino {
		return fmt.Errorf("%s reads an earlier %s (device %d inode %d, now %d/%d)", dev, path, info.Device, info.Inode, st.Dev, st.Ino)
	}
	return nil
}

// loopSetup attaches a free loop device to backing and returns its name. The device does
// direct I/O on the file (see loopDirectIO).
func loopSetup(ctx context.Context, x hostexec.Executor, backing string, readOnly bool) (string, error) {
	args := []string{"--find", "--show", "--direct-io=on"}
	if readOnly {
		args = append(args, "--read-only")
	}
	out, err := x.Run(ctx, "losetup", append(args, backing)...)
	if err != nil {
		return "", err
	}
	dev := lastLine(out)
	if !strings.HasPrefix(dev, "/dev/loop") {
		return "", fmt.Errorf("losetup printed %q, not a loop device", dev)
	}
	return dev, nil
}

// loopDirectIO reports whether dev reads and writes its backing file with direct I/O.
//
// Why direct I/O: without it the loop device reads and writes its file through the page
// cache, synchronously, one request at a time per device (the loop worker waits for each);
// the FUSE file is opened FOPEN_DIRECT_IO anyway, so nothing is cached there, and every read
// of the pod's waits for the one before it: 4 KiB random reads at QD32 ran at QD1. With
// direct I/O the loop device submits its requests as asynchronous direct I/O (lo_rw_aio), and
// FUSE passes them on concurrently (FUSE_ASYNC_DIO), up to max_background. Flushes are
// unchanged: the loop device still turns a flush into an fsync of its file (FUSE_FSYNC).
// losetup only warns when the kernel refuses direct I/O; the device then works as before.
func loopDirectIO(sys, dev string) bool {
	b, err := os.ReadFile(filepath.Join(sys, "block", filepath.Base(dev), "loop", "dio"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// loopEnableDirectIO switches a loop device set up without direct I/O (by an earlier version)
// to direct I/O; the kernel drains and flushes the device's queue first.
func loopEnableDirectIO(ctx context.Context, x hostexec.Executor, sys, dev string) error {
	if loopDirectIO(sys, dev) {
		return nil
	}
	_, err := x.Run(ctx, "losetup", "--direct-io=on", dev)
	return err
}

// loopDetach detaches dev unless it is already gone. Detaching a device still open (mounted)
// only marks it for autoclear, so callers unmount first.
func loopDetach(ctx context.Context, x hostexec.Executor, sys, dev string) error {
	if loopBacking(sys, dev) == "" {
		return nil
	}
	if _, err := x.Run(ctx, "losetup", "--detach", dev); err != nil {
		if loopBacking(sys, dev) == "" {
			return nil // detached by someone else meanwhile
		}
		return err
	}
	return nil
}

// claimAttempts bounds how often LoopSetupReadOnly picks another free loop device after
// another process bound the one it picked first.
const claimAttempts = 3

// LoopSetupReadOnly puts a read-only loop device on top of dev, for publishing a block volume
// read-only: a read-only bind mount does not stop writes through a device node. It picks a
// free loop device and hands its name to claim before binding it to dev, so a caller that
// records the name there leaks nothing if it dies in between; a device another process binds
// first is given up for another.
func LoopSetupReadOnly(ctx context.Context, x hostexec.Executor, dev string, claim func(loop string) error) (string, error) {
	for attempt := 1; ; attempt++ {
		out, err := x.Run(ctx, "losetup", "--find")
		if err != nil {
			return "", err
		}
		loop := lastLine(out)
		if !strings.HasPrefix(loop, "/dev/loop") {
			return "", fmt.Errorf("losetup printed %q, not a loop device", loop)
		}
		if err := claim(loop); err != nil {
			return "", err
		}
		_, err = x.Run(ctx, "losetup", "--read-only", loop, dev)
		if err == nil {
			return loop, nil
		}
		if attempt == claimAttempts || loopBacking(SysRoot, loop) == "" {
			return "", err // not taken by somebody else meanwhile: a real failure
		}
	}
}

// ReadOnlyLoopOver reports whether dev is a read-only loop device layered on a block device
// (what LoopSetupReadOnly makes), and on which.
func ReadOnlyLoopOver(sys, dev string) (string, bool) {
	if !strings.HasPrefix(filepath.Base(dev), "loop") || !loopReadOnly(sys, dev) {
		return "", false
	}
	backing := loopBacking(sys, dev)
	if !strings.HasPrefix(backing, "/dev/") {
		return "", false
	}
	return backing, true
}

// LoopDetach detaches a loop device unless it is already gone.
func LoopDetach(ctx context.Context, x hostexec.Executor, dev string) error {
	return loopDetach(ctx, x, SysRoot, dev)
}

// SysRoot is where sysfs is mounted.
const SysRoot = "/sys"

// DeviceOf is the /dev name of a block device number, from sysfs ("" when there is none).
func DeviceOf(sys string, rdev uint64) string {
	link, err := os.Readlink(filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev))))
	if err != nil {
		return ""
	}
	return "/dev/" + filepath.Base(link)
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
