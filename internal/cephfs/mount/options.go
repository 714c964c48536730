package mount

import (
	"fmt"
	"slices"
	"strings"
)

// Options come from StorageClass parameters (fuseMountOptions, kernelMountOptions) and from
// the volume capability's mount_flags: comma-separated items. They are checked so that none can
// take over what the driver sets itself: which cluster, which user and key, which path, and
// where the daemon keeps its socket and log (a log_file option would let a StorageClass make a
// root daemon write any file on the node).

// FUSE options ceph-fuse hands to libfuse: fsname and subtype change how the mount shows in the
// mount table, where the driver recognises its own mounts.
var reservedFuseOptions = []string{"fsname", "subtype"}

// Ceph settings (--name=value items) a volume may set: client, FUSE and debug settings, except
// those that choose what is mounted or bound the driver's own timeout.
var (
	allowedCephPrefixes = []string{"client_", "fuse_", "debug_"}
	reservedCephOptions = []string{"client_mountpoint", "client_fs", "client_mds_namespace", "client_mount_timeout",
		"client_mount_uid", "client_mount_gid", "client_metadata"}
)

// Kernel options mount.ceph takes for identity, key, filesystem and monitors.
var reservedKernelOptions = []string{"name", "secret", "secretfile", "key", "conf", "mds_namespace", "fs", "mon_addr", "fsid"}

// ParseFuseOptions checks ceph-fuse options: each item is either a FUSE mount option, "name" or
// "name=value", passed in -o, or a Ceph client setting, "--name=value", passed as an argument.
func ParseFuseOptions(lists ...string) ([]string, error) {
	return parseOptions(lists, func(item string) error {
		if after, ok := strings.CutPrefix(item, "--"); ok {
			name, _, _ := strings.Cut(after, "=")
			name = strings.ReplaceAll(name, "-", "_")
			if name == "" || !slices.ContainsFunc(allowedCephPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
				return fmt.Errorf("%q: only client_*, fuse_* and debug_* Ceph settings may be set", item)
			}
			if slices.Contains(reservedCephOptions, name) {
				return fmt.Errorf("%q: the driver sets %s itself", item, name)
			}
			return nil
		}
		if strings.HasPrefix(item, "-") {
			return fmt.Errorf("%q: Ceph settings take the form --name=value; command-line flags are the driver's", item)
		}
		return reserved(item, reservedFuseOptions)
	})
}

// ParseKernelOptions checks mount -t ceph options ("name" or "name=value").
func ParseKernelOptions(lists ...string) ([]string, error) {
	return parseOptions(lists, func(item string) error {
		if strings.HasPrefix(item, "-") {
			return fmt.Errorf("%q is not a mount option", item)
		}
		return reserved(item, reservedKernelOptions)
	})
}

func reserved(item string, names []string) error {
	name, _, _ := strings.Cut(item, "=")
	if name == "" {
		return fmt.Errorf("%q has no option name", item)
	}
	if slices.Contains(names, name) {
		return fmt.Errorf("%q: the driver sets %s itself", item, name)
	}
	return nil
}

// parseOptions splits comma-separated lists, drops empty items and repeats, and checks each
// item; items may not hold blanks or control characters, which no option needs.
func parseOptions(lists []string, check func(string) error) ([]string, error) {
	var out []string
	for _, list := range lists {
		for item := range strings.SplitSeq(list, ",") {
			item = strings.TrimSpace(item)
			if item == "" || slices.Contains(out, item) {
				continue
			}
			if strings.IndexFunc(item, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
				return nil, fmt.Errorf("%q: options may not contain blanks or control characters", item)
			}
			if err := check(item); err != nil {
				return nil, err
			}
			out = append(out, item)
		}
	}
	return out, nil
}
