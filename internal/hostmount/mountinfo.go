package hostmount

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/mount-utils"
)

// MountInfoPath is the mount table MountAt reads.
const MountInfoPath = "/proc/self/mountinfo"

// MountAt returns the topmost mount whose mount point is path, or nil. It reads the mount
// table instead of stat'ing path, so it neither fails nor hangs on a FUSE mount whose daemon
// died or stopped answering.
func MountAt(path string) (*mount.MountInfo, error) { return MountIn(MountInfoPath, path) }

// MountIn is MountAt reading the mount table from the file table (in the format of
// /proc/self/mountinfo).
func MountIn(table, path string) (*mount.MountInfo, error) {
	infos, err := mount.ParseMountInfo(table)
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

// ReadOnly reports whether the mount point itself is read-only.
func ReadOnly(m *mount.MountInfo) bool { return m != nil && slices.Contains(m.MountOptions, "ro") }

// SameFilesystem reports whether two mounts show the same mounted filesystem instance: a
// remounted ceph-fuse gets a new device number, so a bind mount of the old one does not match.
func SameFilesystem(a, b *mount.MountInfo) bool {
	return a != nil && b != nil && a.Major == b.Major && a.Minor == b.Minor
}

// unescapeOctal undoes the \ooo escapes the kernel writes into mountinfo for blanks, tabs,
// newlines and backslashes in paths.
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
