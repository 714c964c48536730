// Package mount mounts CephFS paths on a node: with ceph-fuse (one daemon per mount, each with
// its own admin socket and log so daemons never clash) or with the kernel client (mount -t
// ceph) where the kernel has it. It also tells a healthy mount from a FUSE mount whose daemon
// died.
//
// Keys reach the mount helpers only through 0600 files in a private directory, removed as soon
// as the helper returns; never on a command line, where any user of the node could read them in
// /proc, and never in an error message (ceph-fuse echoes a key it cannot decode).
package mount
