package mounter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/monoceph/monoceph/internal/ceph"
	cephfsmount "github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephname"
	"github.com/monoceph/monoceph/internal/hostmount"
	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
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

// checkCephFSTarget checks a CephFS mount request as the node plugin's volume context and
// staging path checks do: the filesystem and the directory mounted are strict Ceph names
// (they reach ceph-fuse's command line), and the target is a clean absolute path with no
// symbolic link in it, so that the privileged holder mounts where the request says and not
// wherever a link planted on the way leads.
func checkCephFSTarget(fsName, dir, target string) error {
	if err := cephname.Check(fsName); err != nil {
		return fmt.Errorf("%w: filesystem name: %v", ceph.ErrInvalid, err)
	}
	if err := cephname.CheckPath(dir); err != nil {
		return fmt.Errorf("%w: directory to mount: %v", ceph.ErrInvalid, err)
	}
	return checkNoSymlinks(target)
}

// checkNoSymlinks refuses a path that is not clean and absolute, or that has a symbolic link
// in any component. The kernel resolves it (openat2 RESOLVE_NO_SYMLINKS with O_PATH: no file is
// opened, and the last component is not stat'ed, which would hang on a dead FUSE mount). A
// path that does not exist (yet) has no link to follow in what is missing.
func checkNoSymlinks(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%w: mount target %q is not a clean absolute path", ceph.ErrInvalid, p)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		// kernels before 5.6 (RHEL 8's 4.18), or a seccomp profile that does not know openat2
		err = walkNoSymlinks(p)
	} else if err == nil {
		_ = unix.Close(fd)
	}
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: mount target %q has a symbolic link in it", ceph.ErrInvalid, p)
	default:
		return fmt.Errorf("%w: mount target %q: %v", ceph.ErrInvalid, p, err)
	}
}

// walkNoSymlinks is checkNoSymlinks without openat2: each component of the clean absolute p in
// turn, ELOOP at the first symbolic link, ENOENT at the first that does not exist. The
// components before the last are lstat'ed (directories of the kubelet's); the last is only
// readlink'ed, which answers EINVAL for anything but a link without asking the filesystem
// mounted there (a dead FUSE server would hang a stat).
func walkNoSymlinks(p string) error {
	parts := strings.Split(p[1:], "/")
	at := ""
	for i, part := range parts {
		at += "/" + part
		if i == len(parts)-1 {
			_, err := os.Readlink(at)
			switch {
			case err == nil:
				return unix.ELOOP
			case errors.Is(err, unix.EINVAL):
				return nil
			default:
				return err
			}
		}
		fi, err := os.Lstat(at)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return unix.ELOOP
		}
	}
	return nil
}

// fuseConnection reads the FUSE connection an open /dev/fuse serves from its fdinfo
// (fuse_connection:, Linux 6.13 and later: the device number of the mount in the kernel's
// encoding, as /sys/fs/fuse/connections names it). ok is false where the kernel does not say
// (older kernels, or a descriptor that serves no mount yet).
func fuseConnection(fdinfo []byte) (dev uint64, ok bool, err error) {
	for _, line := range strings.Split(string(fdinfo), "\n") {
		if v, found := strings.CutPrefix(line, "fuse_connection:"); found {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0, false, fmt.Errorf("fdinfo %q: %v", line, err)
			}
			return n, true, nil
		}
	}
	return 0, false, nil
}

// checkFuseConnection refuses a /dev/fuse descriptor that does not serve the mount at dir (the
// FUSE directory of the attachment a request resumes or detaches): the holder would otherwise
// serve, or abort, another mount's connection. The mount's device is read from the mount
// table, never by stat'ing dir (that hangs on a dead FUSE mount). On a kernel whose fdinfo does
// not name the connection (before 6.13), only checkFuseFD's /dev/fuse check is made: there is
// no other way to tie a descriptor to a mount without asking the mount.
func checkFuseConnection(f *os.File, dir string) error {
	if f == nil {
		return nil
	}
	fdinfo, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	if err != nil {
		return fmt.Errorf("%w: the descriptor passed: %v", ceph.ErrInvalid, err)
	}
	m, err := hostmount.MountAt(dir)
	if err != nil {
		return fmt.Errorf("reading the mount table: %w", err)
	}
	return connectionOf(fdinfo, m, dir)
}

// connectionOf checks that the descriptor whose fdinfo is given serves mount m (at dir; nil:
// nothing is mounted there).
func connectionOf(fdinfo []byte, m *mountutils.MountInfo, dir string) error {
	dev, ok, err := fuseConnection(fdinfo)
	if err != nil {
		return fmt.Errorf("%w: the descriptor passed: %v", ceph.ErrInvalid, err)
	}
	if !ok {
		return nil
	}
	// the kernel's own dev_t encoding (MAJOR: the bits above 20), not the C library's
	major, minor := dev>>20, dev&(1<<20-1)
	if m == nil || uint64(m.Major) != major || uint64(m.Minor) != minor {
		return fmt.Errorf("%w: the descriptor passed serves FUSE connection %d:%d, not the mount at %s", ceph.ErrInvalid, major, minor, dir)
	}
	return nil
}
