// Package fusefile serves one file (an RBD image, for a loop device) over a FUSE connection
// that outlives the process serving it: whoever else holds a duplicate of the connection's
// /dev/fuse descriptor keeps it open, and a new Server resumes it.
//
// Why not rbd-fuse: a loop device reads its backing file through the FUSE connection of the
// mount the file is on. When the daemon serving that connection exits, the kernel aborts the
// connection (once the last /dev/fuse descriptor is closed) and every later read or write of
// the loop device fails with EIO; a read-write loop device cannot be re-pointed at another file
// (LOOP_CHANGE_FD works on read-only devices only). Keeping a duplicate of the /dev/fuse
// descriptor in another process keeps the connection open, but a new rbd-fuse cannot take it
// over: libfuse 2 has no way to adopt an existing descriptor, and the kernel never repeats the
// FUSE_INIT handshake or the node IDs and file handles the dead daemon gave out. A server of
// one file has no such state: node 1 is the directory, node 2 the file, file handles are
// ignored, and the only thing INIT negotiated that matters (the protocol minor version) is
// kept in State. Requests the old server had read but not answered are asked back with
// FUSE_NOTIFY_RESEND (Linux 6.9); every operation served here is idempotent (reads, writes of
// the same bytes at the same offset, flushes, attributes), so answering one twice is harmless.
//
// Protocol structures come from github.com/hanwen/go-fuse/v2/fuse; the request loop is this
// package's own, since go-fuse's server always starts with the INIT handshake.
package fusefile
