// Package cephname checks the names a node passes to Ceph tools and builds paths from — Ceph
// user IDs, pools, RADOS namespaces, images, filesystems, snapshots and subvolume paths —
// against one strict character set, so that no name from a request or a volume context can
// become a command-line option, a second mount option or a path outside its directory.
package cephname
