package mounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/monoceph/monoceph/internal/ceph"
	cephfsmount "github.com/monoceph/monoceph/internal/cephfs/mount"
	"golang.org/x/sys/unix"
)

// The holder runs privileged, with the kubelet directory mounted bidirectionally, and answers
// whoever reaches its socket as root: it checks what it is asked as the node plugin does
// before asking, rather than trusting that it was checked.

// checkWorkDir refuses a work directory that is not directly in the state directory: the
// holder mounts, writes key files and removes directories there, and nowhere else. The check
// holds after symlinks are resolved, so a link in the state directory cannot lead elsewhere.
func (s *Server) checkWorkDir(dir string) error {
	refuse := func(why string) error {
		return fmt.Errorf("%w: work directory %q is not in this holder's state directory %s%s", ceph.ErrInvalid, dir, s.opts.StateDir, why)
	}
	if s.opts.StateDir == "" || !filepath.IsAbs(dir) || filepath.Dir(filepath.Clean(dir)) != filepath.Clean(s.opts.StateDir) {
		return refuse("")
	}
	state, err := filepath.EvalSymlinks(s.opts.StateDir)
	if err != nil {
		return refuse(fmt.Sprintf(" (%v)", err))
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // made later, by the mount itself
	case err != nil:
		return refuse(fmt.Sprintf(" (%v)", err))
	case !fi.IsDir():
		return refuse(" (it is a symbolic link or not a directory)")
	}
	if real, err := filepath.EvalSymlinks(dir); err != nil || filepath.Dir(real) != state {
		return refuse(" once symbolic links are resolved")
	}
	return nil
}

// fuseDevice is /dev/fuse's device number (misc major 10, minor 229: devices.txt).
var fuseDevice = unix.Mkdev(10, 229)

// checkFuseFD refuses a descriptor that is not an open /dev/fuse: the holder would serve a FUSE
// connection on it, and read and write whatever file it really is.
func checkFuseFD(f *os.File) error {
	if f == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%w: the descriptor passed: %v", ceph.ErrInvalid, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != fuseDevice {
		return fmt.Errorf("%w: the descriptor passed is not /dev/fuse", ceph.ErrInvalid)
	}
	return nil
}

// checkCephFSOptions checks mount options as the node plugin's ParseOptions does: only
// client_*, fuse_* and debug_* settings and FUSE options, none the driver sets itself.
func checkCephFSOptions(opts []string) error {
	parsed, err := cephfsmount.ParseFuseOptions(opts...)
	if err != nil {
		return fmt.Errorf("%w: mount options: %v", ceph.ErrInvalid, err)
	}
	if !slices.Equal(parsed, opts) {
		return fmt.Errorf("%w: mount options %q are not in the form the node plugin sends", ceph.ErrInvalid, opts)
	}
	return nil
}
