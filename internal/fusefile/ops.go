package fusefile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Opcodes of the FUSE protocol (include/uapi/linux/fuse.h) this server handles; go-fuse keeps
// its own unexported.
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opFsync       = 20
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opFsyncdir    = 30
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42
	opFallocate   = 43
)

// Node IDs: the kernel names the root 1; the file is the only other node.
const (
	rootNode = 1
	fileNode = 2
)

// FileInode is the file's inode number, what a loop device on it reports (LOOP_GET_STATUS64)
// with the mount's device number.
const FileInode = fileNode

const headerSize = int(unsafe.Sizeof(fuse.InHeader{}))

func (s *Server) serve(req []byte) {
	h, _ := as[fuse.InHeader](req)
	switch h.Opcode {
	case opForget, opBatchForget, opInterrupt:
		// no answer expected: lookups are not counted, and every request is answered anyway
	case opInit:
		// a connection is initialised once, before the loop runs (see handshake)
		s.reply(h.Unique, syscall.EPROTO)
	case opLookup:
		s.lookup(h, req)
	case opGetattr:
		s.getattr(h)
	case opSetattr:
		s.setattr(h, req)
	case opOpen:
		s.open(h, req)
	case opOpendir:
		s.reply(h.Unique, 0, bytesOf(&fuse.OpenOut{}))
	case opRead:
		s.read(h, req)
	case opReaddir:
		s.readdirRoot(h, req)
	case opWrite:
		s.write(h, req)
	case opFsync, opFlush:
		// a flush comes with every close: the loop device's detach then finds its writes durable
		s.reply(h.Unique, errnoOf(s.b.Flush()))
	case opRelease, opReleasedir, opFsyncdir, opDestroy:
		s.reply(h.Unique, 0)
	case opStatfs:
		s.statfs(h)
	case opFallocate:
		s.fallocate(h, req)
	default:
		// ACCESS, xattrs and the rest: ENOSYS makes the kernel stop asking or refuse by itself;
		// anything that would change the tree (unlink, rename, create) is refused
		s.reply(h.Unique, syscall.ENOSYS)
	}
}

func (s *Server) attr(node uint64) (fuse.Attr, syscall.Errno) {
	switch node {
	case rootNode:
		return fuse.Attr{Ino: rootNode, Mode: unix.S_IFDIR | 0o755, Nlink: 2}, 0
	case fileNode:
		size, err := s.b.Size()
		if err != nil {
			return fuse.Attr{}, errnoOf(err)
		}
		mode := uint32(0o600)
		if s.opts.ReadOnly {
			mode = 0o400
		}
		return fuse.Attr{Ino: fileNode, Mode: unix.S_IFREG | mode, Nlink: 1, Size: uint64(size),
			Blocks: uint64(size+511) / 512, Blksize: 4096}, 0
	}
	return fuse.Attr{}, syscall.ENOENT
}

func (s *Server) lookup(h *fuse.InHeader, req []byte) {
	name, _, _ := bytes.Cut(req[headerSize:], []byte{0})
	if h.NodeId != rootNode || string(name) != s.opts.Name {
		s.reply(h.Unique, syscall.ENOENT)
		return
	}
	a, errno := s.attr(fileNode)
	if errno != 0 {
		s.reply(h.Unique, errno)
		return
	}
	// no entry or attribute caching: the size changes when the image grows
	out := fuse.EntryOut{NodeId: fileNode, Generation: 1, Attr: a}
	s.reply(h.Unique, 0, bytesOf(&out))
}

func (s *Server) getattr(h *fuse.InHeader) {
	a, errno := s.attr(h.NodeId)
	if errno != 0 {
		s.reply(h.Unique, errno)
		return
	}
	out := fuse.AttrOut{Attr: a}
	s.reply(h.Unique, 0, bytesOf(&out))
}

// setattr accepts what does not change the content (times, modes: ignored) and refuses a
// size change: the image's size is the controller's business.
func (s *Server) setattr(h *fuse.InHeader, req []byte) {
	in, ok := as[fuse.SetAttrInCommon](req)
	if !ok {
		s.reply(h.Unique, syscall.EINVAL)
		return
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		s.reply(h.Unique, syscall.EPERM)
		return
	}
	s.getattr(h)
}

func (s *Server) open(h *fuse.InHeader, req []byte) {
	in, ok := as[fuse.OpenIn](req)
	if !ok || h.NodeId != fileNode {
		s.reply(h.Unique, syscall.EISDIR)
		return
	}
	if s.opts.ReadOnly && in.Flags&unix.O_ACCMODE != unix.O_RDONLY {
		s.reply(h.Unique, syscall.EROFS)
		return
	}
	// direct I/O: no page cache of the file under the loop device's own, so nothing is cached
	// twice and nothing cached survives a change of server
	out := fuse.OpenOut{Fh: 1, OpenFlags: fuse.FOPEN_DIRECT_IO}
	s.reply(h.Unique, 0, bytesOf(&out))
}

func (s *Server) read(h *fuse.InHeader, req []byte) {
	in, ok := s.readArgs(h, req)
	if !ok {
		return
	}
	// a pooled buffer: reads of 1 MiB would otherwise allocate (and zero) 1 MiB each
	bp := s.data.Get().(*[]byte)
	defer s.data.Put(bp)
	buf := (*bp)[:in.Size]
	n, err := s.b.ReadAt(buf, int64(in.Offset))
	s.replyRead(h.Unique, buf[:n], err)
}

// readAsync serves a read through the backend's AsyncReader and calls release once it is
// answered.
func (s *Server) readAsync(h *fuse.InHeader, req []byte, release func()) {
	in, ok := s.readArgs(h, req)
	if !ok {
		release()
		return
	}
	unique := h.Unique
	err := s.async.ReadAsync(int64(in.Offset), int(in.Size), func(p []byte, err error) {
		defer release()
		s.replyRead(unique, p, err)
	})
	if err != nil {
		s.reply(unique, errnoOf(err))
		release()
	}
}

// readArgs are a READ's arguments; a READ the server cannot serve is answered EINVAL here
// (ok false).
func (s *Server) readArgs(h *fuse.InHeader, req []byte) (*fuse.ReadIn, bool) {
	in, ok := as[fuse.ReadIn](req)
	if !ok || in.Size > maxWrite || h.NodeId != fileNode {
		s.reply(h.Unique, syscall.EINVAL)
		return nil, false
	}
	return in, true
}

// replyRead answers a read with what it read: the error only when nothing was (a short read
// at the end of the file is its data, EOF no error).
func (s *Server) replyRead(unique uint64, p []byte, err error) {
	if err != nil && len(p) == 0 && !errors.Is(err, io.EOF) {
		s.reply(unique, errnoOf(err))
		return
	}
	s.reply(unique, 0, p)
}

func (s *Server) write(h *fuse.InHeader, req []byte) {
	in, ok := as[fuse.WriteIn](req)
	data := req[min(len(req), int(unsafe.Sizeof(fuse.WriteIn{}))):]
	if !ok || uint32(len(data)) < in.Size {
		s.reply(h.Unique, syscall.EINVAL)
		return
	}
	if s.opts.ReadOnly {
		s.reply(h.Unique, syscall.EROFS)
		return
	}
	n, err := s.b.WriteAt(data[:in.Size], int64(in.Offset))
	if err != nil {
		s.reply(h.Unique, errnoOf(err))
		return
	}
	out := fuse.WriteOut{Size: uint32(n)}
	s.reply(h.Unique, 0, bytesOf(&out))
}

func (s *Server) statfs(h *fuse.InHeader) {
	size, err := s.b.Size()
	if err != nil {
		s.reply(h.Unique, errnoOf(err))
		return
	}
	out := fuse.StatfsOut{Blocks: uint64(size) / 4096, Files: 1, Bsize: 4096, Frsize: 4096, NameLen: 255}
	s.reply(h.Unique, 0, bytesOf(&out))
}

// fallocate turns a hole punched in the file (a discard of the loop device) into the
// backend's discard; other modes (preallocation, zeroing ranges) are not offered, and the
// loop device then writes zeros itself.
func (s *Server) fallocate(h *fuse.InHeader, req []byte) {
	in, ok := as[fuse.FallocateIn](req)
	d, canDiscard := s.b.(Discarder)
	switch {
	case !ok:
		s.reply(h.Unique, syscall.EINVAL)
	case s.opts.ReadOnly:
		s.reply(h.Unique, syscall.EROFS)
	case !canDiscard || in.Mode != unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE:
		s.reply(h.Unique, syscall.EOPNOTSUPP)
	default:
		s.reply(h.Unique, errnoOf(d.Discard(int64(in.Offset), int64(in.Length))))
	}
}

// readdirRoot lists ".", ".." and the file, from the entry at the request's offset on, as
// many as fit.
func (s *Server) readdirRoot(h *fuse.InHeader, req []byte) {
	in, ok := as[fuse.ReadIn](req)
	if !ok || h.NodeId != rootNode {
		s.reply(h.Unique, syscall.ENOTDIR)
		return
	}
	entries := []struct {
		ino  uint64
		typ  uint32
		name string
	}{{rootNode, unix.DT_DIR, "."}, {rootNode, unix.DT_DIR, ".."}, {fileNode, unix.DT_REG, s.opts.Name}}
	var out []byte
	for i := int(min(in.Offset, uint64(len(entries)))); i < len(entries); i++ {
		e := entries[i]
		// struct fuse_dirent: ino, off (of the next entry), namelen, type, name, padded to 8
		rec := binary.NativeEndian.AppendUint64(nil, e.ino)
		rec = binary.NativeEndian.AppendUint64(rec, uint64(i+1))
		rec = binary.NativeEndian.AppendUint32(rec, uint32(len(e.name)))
		rec = binary.NativeEndian.AppendUint32(rec, e.typ)
		rec = append(rec, e.name...)
		rec = append(rec, make([]byte, (8-len(rec)%8)%8)...)
		if len(out)+len(rec) > int(in.Size) {
			break
		}
		out = append(out, rec...)
	}
	s.reply(h.Unique, 0, out)
}

// errnoOf is the errno to answer for err: the backend's own errno when it carries one (go-ceph
// errors do, as negative numbers), else EIO.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	var coded interface{ ErrorCode() int }
	if errors.As(err, &coded) {
		if c := coded.ErrorCode(); c < 0 {
			return syscall.Errno(-c)
		} else if c > 0 {
			return syscall.Errno(c)
		}
	}
	return syscall.EIO
}
