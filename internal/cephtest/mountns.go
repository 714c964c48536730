package cephtest

import "os"

// DropOtherMounts is a shell script that lazily unmounts, in the mount namespace it runs in,
// every mount under the temporary directory except those under its first argument, then
// shifts that argument off. A namespace made by copying the host's mounts holds copies of
// every mount there, other tests' volumes too (the host's / is private on many machines, so
// their unmounts do not reach the copies): the copies would keep those tests' loop devices
// open, and their unstage failing, for as long as the namespace lives. Each is made private
// (with everything below it) in this namespace first: a copy that is a peer of the host's
// mount (a namespace made with propagation unchanged) would otherwise pass the unmount on to
// the host, unmounting the other test's volume there. Container runtimes drop the host's
// mounts the same way (pivot_root).
var DropOtherMounts = `keep="$1"; shift; tmp="` + os.TempDir() + `/"
awk '{print $5}' /proc/self/mountinfo | while read -r m; do
	case "$m" in "$keep"|"$keep"/*) ;; "$tmp"*) mount --make-rprivate "$m" 2>/dev/null && umount -l "$m" 2>/dev/null ;; esac
done; true`
