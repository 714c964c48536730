// Package imagefs shows one RBD image as a file in a FUSE mount, the way rbd-fuse does, for
// the rbd-fuse + loop device mounter where the node's rbd-fuse cannot serve the image.
//
// Why it exists: rbd-fuse 18.2 and 20.2 as Debian 13 and forky build them (libfuse 3) crash
// in fuse_opt_parse whenever they are given a pool or a RADOS namespace: their defaults are
// string literals, and libfuse 3 frees the old value of a "%s" option before storing the new
// one (free() on read-only data: SIGSEGV for --poolname, SIGABRT for --namespace). No other
// option or configuration sets them, so on those releases rbd-fuse serves pool rbd's default
// namespace only. This package serves any pool and namespace, with librbd in the same way.
//
// Compared with rbd-fuse: the mount holds exactly the one image (rbd-fuse lists every image of
// the pool on each lookup); reads and writes go straight to librbd (FOPEN_DIRECT_IO: no second
// copy in the page cache behind the loop device); attributes are never cached, so a grown image
// shows its new size at once; a hole punched through the loop device (a discard, fstrim)
// becomes an RBD discard that frees the objects, where rbd-fuse answers EOPNOTSUPP.
package imagefs

import (
	"context"
	"errors"
	"io"
	"syscall"

	"github.com/ceph/go-ceph/rbd"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Image is what the file system needs of an open image; *rbd.Image has it.
type Image interface {
	GetSize() (uint64, error)
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Discard(off uint64, length uint64) (int, error)
	Flush() error
}

var _ Image = (*rbd.Image)(nil)

// root is the mount's directory: it holds the image file and nothing else.
type root struct {
	fs.Inode
	name string
	file *file
}

var _ = (fs.NodeOnAdder)((*root)(nil))

func (r *root) OnAdd(ctx context.Context) {
	child := r.NewPersistentInode(ctx, r.file, fs.StableAttr{Mode: fuse.S_IFREG, Ino: 2})
	r.AddChild(r.name, child, false)
}

// file is the image.
type file struct {
	fs.Inode
	img      Image
	readOnly bool
}

var (
	_ = (fs.NodeGetattrer)((*file)(nil))
	_ = (fs.NodeSetattrer)((*file)(nil))
	_ = (fs.NodeOpener)((*file)(nil))
	_ = (fs.NodeReader)((*file)(nil))
	_ = (fs.NodeWriter)((*file)(nil))
	_ = (fs.NodeFsyncer)((*file)(nil))
	_ = (fs.NodeFlusher)((*file)(nil))
	_ = (fs.NodeAllocater)((*file)(nil))
)

// errno turns a librbd error into the errno the kernel passes on; anything else is EIO.
func errno(err error) syscall.Errno {
	var coder interface{ ErrorCode() int }
	if errors.As(err, &coder) {
		if c := coder.ErrorCode(); c < 0 {
			return syscall.Errno(-c)
		}
	}
	return syscall.EIO
}

func (f *file) size() (int64, syscall.Errno) {
	n, err := f.img.GetSize()
	if err != nil {
		return 0, errno(err)
	}
	return int64(n), 0
}

func (f *file) fill(out *fuse.Attr, size int64) {
	out.Mode = fuse.S_IFREG | 0o600
	if f.readOnly {
		out.Mode = fuse.S_IFREG | 0o400
	}
	out.Nlink = 1
	out.Size = uint64(size)
	out.Blksize = 4096
	out.Blocks = uint64(size+511) / 512
}

// Getattr asks librbd for the size every time: librbd learns of a resize from the header's
// watch, and the mount caches no attributes.
func (f *file) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	size, e := f.size()
	if e != 0 {
		return e
	}
	f.fill(&out.Attr, size)
	return 0
}

// Setattr accepts what the kernel sends around writes (times, modes) and refuses size
// changes: the image's size is the controller's business.
func (f *file) Setattr(_ context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	size, e := f.size()
	if e != 0 {
		return e
	}
	if want, ok := in.GetSize(); ok && int64(want) != size {
		return syscall.EPERM
	}
	f.fill(&out.Attr, size)
	return 0
}

func (f *file) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if f.readOnly && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	if flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EPERM
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

// Read reads up to the image's end; a read past it is empty, as for a regular file.
func (f *file) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	size, e := f.size()
	if e != 0 {
		return nil, e
	}
	if off >= size {
		return fuse.ReadResultData(nil), 0
	}
	dest = dest[:min(int64(len(dest)), size-off)]
	n, err := f.img.ReadAt(dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write writes within the image; the file never grows (ENOSPC past its end).
func (f *file) Write(_ context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if f.readOnly {
		return 0, syscall.EROFS
	}
	size, e := f.size()
	if e != 0 {
		return 0, e
	}
	if off+int64(len(data)) > size {
		return 0, syscall.ENOSPC
	}
	n, err := f.img.WriteAt(data, off)
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

func (f *file) flush() syscall.Errno {
	if err := f.img.Flush(); err != nil {
		return errno(err)
	}
	return 0
}

// Fsync and Flush (the file's close) wait for librbd's cache to reach the OSDs.
func (f *file) Fsync(context.Context, fs.FileHandle, uint32) syscall.Errno { return f.flush() }
func (f *file) Flush(context.Context, fs.FileHandle) syscall.Errno         { return f.flush() }

// fallocate modes (linux/falloc.h)
const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
)

// Allocate serves hole punching, which a loop device sends for a discard: an RBD discard.
// The connection sets rbd_skip_partial_discard=false, so partial objects are zeroed and the
// range reads back as zeros, as a punched hole must. Other modes (preallocation, zeroing,
// collapsing) are EOPNOTSUPP: the image is always its full size.
func (f *file) Allocate(_ context.Context, _ fs.FileHandle, off, length uint64, mode uint32) syscall.Errno {
	if f.readOnly {
		return syscall.EROFS
	}
	if mode != fallocPunchHole|fallocKeepSize {
		return syscall.EOPNOTSUPP
	}
	size, e := f.size()
	if e != 0 {
		return e
	}
	if off >= uint64(size) {
		return 0
	}
	if _, err := f.img.Discard(off, min(length, uint64(size)-off)); err != nil {
		return errno(err)
	}
	return 0
}

// NewRoot returns the mount's root: a directory holding img as the file name.
func NewRoot(name string, img Image, readOnly bool) fs.InodeEmbedder {
	return &root{name: name, file: &file{img: img, readOnly: readOnly}}
}
