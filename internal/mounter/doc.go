// Package mounter is the mount holder: a long-lived process (monoceph --mode=mounter) that
// owns a node's FUSE mounts (ceph-fuse daemons, the RBD image files the fuse mounter serves)
// and the loop devices on them, so that the node plugin can restart and roll without taking
// them down; and the node plugin's client of it.
//
// They talk over a unix socket in the state directory, one request per connection: a JSON
// message, and at most one file descriptor passed along (SCM_RIGHTS). That is why this is not
// gRPC: the FUSE connection of an RBD image file travels with the answer to the plugin, which
// keeps it (its "custody") for as long as the volume is staged, and back to a restarted
// holder, which resumes serving it. At any moment one of the two processes holds the
// connection open, so the loop device and the filesystem on it never see it end: requests
// wait in the kernel while neither serves. Keys travel in the messages, never on a command
// line or in the environment, and are never logged; the socket's directory is root's only and
// the peer's credentials are checked.
//
// The protocol is versioned (Version); a holder is updated rarely, so a plugin must keep
// speaking to holders older than itself: operations and fields are only ever added.
package mounter
