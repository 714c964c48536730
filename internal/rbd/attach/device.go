package attach

import (
	"errors"
	"io/fs"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
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

// exists reports whether path exists; errors other than "does not exist" count as existing,
// so a caller never skips cleaning up something it merely could not stat.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
