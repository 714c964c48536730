package attach

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/fusefile"
	"k8s.io/klog/v2"
)

// Connection is a FUSE connection of an image file: a /dev/fuse descriptor and what resuming
// the connection needs. Whoever holds it keeps the connection (and the loop device on it)
// alive while no server runs.
type Connection struct {
	File  *os.File
	State fusefile.State
	// Encryption is the key of an encrypted image, kept with its connection (in memory only)
	// so that the server that resumes the connection can open the image again.
	Encryption *Encryption
}

// session is one image served at one FUSE directory.
type session struct {
	dir      string
	image    Image
	readOnly bool
	srv      *fusefile.Server
	img      *openImage // nil for an offline session (see DetachResuming)
	enc      *Encryption
}

func (s *session) ended() bool {
	select {
	case <-s.srv.Done():
		return true
	default:
		return false
	}
}

func (f *Fuse) session(dir string) *session {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessions[dir]
}

// start opens the image and serves it at a's directory: on a new mount, or, with conn, on the
// existing connection conn keeps.
func (f *Fuse) start(ctx context.Context, req Request, a Attachment, conn *Connection) (*session, error) {
	img, err := f.open(ctx, req)
	if err != nil {
		return nil, err
	}
	var s *session
	if conn != nil {
		s, err = f.resume(a.FuseDir, a, conn, img.backend())
	} else {
		s, err = f.mount(a, img.backend())
	}
	if err != nil {
		img.close(klog.FromContext(ctx))
		return nil, err
	}
	s.img = img
	s.enc = req.Encryption
	return s, nil
}

func (f *Fuse) mount(a Attachment, b fusefile.Backend) (*session, error) {
	srv, err := fusefile.Mount(a.FuseDir, f.fileOptions(a), b)
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.attach.mounted")
	return f.add(a, srv), nil
}

func (f *Fuse) resume(dir string, a Attachment, conn *Connection, b fusefile.Backend) (*session, error) {
	srv, err := fusefile.Resume(conn.File, conn.State, f.fileOptions(a), b)
	if err != nil {
		return nil, fmt.Errorf("resuming the FUSE connection at %s: %w", dir, err)
	}
	return f.add(a, srv), nil
}

func (f *Fuse) fileOptions(a Attachment) fusefile.Options {
	return fusefile.Options{Name: fileName(a), ReadOnly: a.ReadOnly, Subtype: FuseSubtype,
		Log: klog.Background().WithValues("image", a.Image.Spec(), "dir", a.FuseDir)}
}

func (f *Fuse) add(a Attachment, srv *fusefile.Server) *session {
	s := &session{dir: a.FuseDir, image: a.Image, readOnly: a.ReadOnly, srv: srv}
	f.mu.Lock()
	f.sessions[s.dir] = s
	f.mu.Unlock()
	return s
}

// stopTimeout bounds the wait for requests in flight when a server stops.
const stopTimeout = time.Minute

// end stops serving s (requests in flight are answered first) and closes its image.
func (f *Fuse) end(ctx context.Context, s *session) {
	log := klog.FromContext(ctx)
	if err := s.srv.Stop(stopTimeout); err != nil {
		log.Error(err, "Stopping the FUSE server of an image: the image stays open until the server's loop ends", "dir", s.dir)
		if s.img != nil {
			// the server's loop may still start a read on the image (it waits for a request
			// slot, which a read's completion gives it): closing the image under it would
			// free the ImageCtx that read uses. The image is closed once the loop ended,
			// which may be never: then it stays open (leaked) rather than crash the holder.
			go func(img *openImage) {
				<-s.srv.Done()
				img.close(log)
			}(s.img)
		}
	} else if s.img != nil {
		s.img.close(log)
	}
	f.mu.Lock()
	if f.sessions[s.dir] == s {
		delete(f.sessions, s.dir)
	}
	f.mu.Unlock()
}

// Connection returns a new descriptor of the FUSE connection served at dir, for the process
// that keeps it while this one restarts.
func (f *Fuse) Connection(dir string) (*Connection, error) {
	s := f.session(dir)
	if s == nil || s.ended() {
		return nil, fmt.Errorf("nothing is served at %s", dir)
	}
	file, err := s.srv.Dup()
	if err != nil {
		return nil, err
	}
	return &Connection{File: file, State: s.srv.State(), Encryption: s.enc}, nil
}

// Stop stops serving the image at dir (requests in flight are answered first) and closes it,
// leaving the mount and loop devices. The connection lives on as long as a descriptor of it
// is kept elsewhere (see Connection); without one it ends, and the mount is dead.
func (f *Fuse) Stop(ctx context.Context, dir string) error {
	unlock, err := f.lock(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	if s := f.session(dir); s != nil {
		f.end(ctx, s)
	}
	return nil
}

// Shutdown stops every server (requests in flight are answered first) and closes the images,
// leaving the mounts and loop devices: their connections live on in the process that keeps
// them, and the next server resumes them. Without such a process the connections end here.
func (f *Fuse) Shutdown(ctx context.Context) {
	f.mu.Lock()
	var all []*session
	for _, s := range f.sessions {
		all = append(all, s)
	}
	f.mu.Unlock()
	for _, s := range all {
		f.end(ctx, s)
	}
}

// openImage is an image open for serving, with what keeps it open.
type openImage struct {
	conn *ceph.Conn
	io   *rados.IOContext
	img  *rbd.Image
	spec string
	aio  *aioReader // nil: reads go through ReadAt
}

// openTimeout is ConnectTimeout, and for an encrypted image EncryptionTimeout more: the key
// load (argon2id, ~2 s alone, longer waiting for a KDF slot) is no connection.
func (f *Fuse) openTimeout(req Request) time.Duration {
	if req.Encryption != nil {
		return f.ConnectTimeout + f.EncryptionTimeout
	}
	return f.ConnectTimeout
}

// open opens the image of req on a data connection (no OSD operation timeout: see
// ceph.Pool.GetForData), within ctx and ConnectTimeout. An open that outlives them is closed
// when it finishes.
func (f *Fuse) open(ctx context.Context, req Request) (*openImage, error) {
	ctx, cancel := context.WithTimeout(ctx, f.openTimeout(req))
	defer cancel()
	conn, err := f.pool.GetForDataAt(ctx, req.MonHost, req.Cred, f.crushLocation(ctx, req))
	if err != nil {
		return nil, err
	}
	spec := req.Image.Spec()
	opened := make(chan *openImage, 1)
	_, err = ceph.Call(ctx, conn, "open image "+spec, func(c *rados.Conn) (struct{}, error) {
		defer close(opened)
		io, err := c.OpenIOContext(req.Image.Pool)
		if err != nil {
			return struct{}{}, err
		}
		io.SetNamespace(req.Image.Namespace)
		open := rbd.OpenImage
		if req.ReadOnly {
			open = rbd.OpenImageReadOnly
		}
		img, err := open(io, req.Image.Name, rbd.NoSnapshot)
		if err != nil {
			io.Destroy()
			return struct{}{}, err
		}
		if err := loadEncryption(ctx, img, spec, req.Encryption); err != nil {
			_ = img.Close()
			io.Destroy()
			return struct{}{}, err
		}
		o := &openImage{conn: conn, io: io, img: img, spec: spec}
		if o.aio, err = newAIOReader(img); err != nil {
			klog.FromContext(ctx).Error(err, "Reading the image synchronously: librbd's aio is not reachable", "image", spec)
		}
		opened <- o
		return struct{}{}, nil
	})
	if err != nil {
		// an open still running closes what it opens when it is done
		go func() {
			for o := range opened {
				o.close(klog.Background())
			}
			conn.Release()
		}()
		if ceph.Is(err, ceph.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s: %v", ErrImageNotFound, spec, err)
		}
		return nil, err
	}
	return <-opened, nil
}

// crushLocation is the CRUSH location the image's connection is given: req's, where the
// cluster's require_osd_release allows replica reads (Octopus and newer; older OSDs could
// answer a replica read with stale data), else none. A failed check costs only the affinity:
// the image still opens, reading from primaries.
func (f *Fuse) crushLocation(ctx context.Context, req Request) string {
	if req.CrushLocation == "" {
		return ""
	}
	log := klog.FromContext(ctx)
	f.mu.Lock()
	ok := f.replicaReads[req.MonHost]
	f.mu.Unlock()
	if ok {
		return req.CrushLocation
	}
	conn, err := f.pool.Get(ctx, req.MonHost, req.Cred)
	if err != nil {
		log.Error(err, "Read affinity off for this image: checking the cluster's release failed", "image", req.Image.Spec())
		return ""
	}
	defer conn.Release()
	allowed, release, err := ceph.ReplicaReadsAllowed(ctx, conn)
	if err != nil {
		log.Error(err, "Read affinity off for this image: checking the cluster's release failed", "image", req.Image.Spec())
		return ""
	}
	if !allowed {
		log.Info("Read affinity off: the cluster's require_osd_release is older than octopus", "release", release, "image", req.Image.Spec())
		return ""
	}
	f.mu.Lock()
	f.replicaReads[req.MonHost] = true // a cluster's require_osd_release never goes back
	f.mu.Unlock()
	log.V(2).Info("Reading from the nearest replica", "image", req.Image.Spec(), "crushLocation", req.CrushLocation)
	return req.CrushLocation
}

func (o *openImage) close(log klog.Logger) {
	if err := o.img.Close(); err != nil {
		log.Error(err, "Closing an image", "image", o.spec)
	}
	// whatever rbd_close returned (-EBLOCKLISTED...), librbd deleted the image: the aio
	// reader's close waits for the completions still due before it frees their slots
	if o.aio != nil {
		if err := o.aio.close(); err != nil {
			log.Error(err, "Closing an image's aio reader", "image", o.spec)
		}
	}
	o.io.Destroy()
	o.conn.Release()
}

// ReadAt implements fusefile.Backend; reads end at the image's end (librbd refuses them
// past it).
func (o *openImage) ReadAt(p []byte, off int64) (int, error) {
	size, err := o.img.GetSize()
	if err != nil {
		return 0, err
	}
	if off >= int64(size) {
		return 0, io.EOF
	}
	if rest := int64(size) - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	return o.img.ReadAt(p, off)
}

// aioImage is an image read with librbd's aio: only an image that has it is a
// fusefile.AsyncReader, the others are read with ReadAt in the server's pooled buffers.
type aioImage struct{ *openImage }

// backend is what serves o: aioImage when o has aio.
func (o *openImage) backend() fusefile.Backend {
	if o.aio != nil {
		return aioImage{o}
	}
	return o
}

// ReadAsync implements fusefile.AsyncReader with librbd's aio; reads end at the image's end.
// It never asks the image's size: the server calls it from its request loop, and
// rbd_get_size refreshes the header synchronously (OSD round trips) while a header update is
// pending (a snapshot, a resize), which would stall every request. librbd clips a read that
// runs past the end, and fails one that starts at or after it with -EINVAL (clip_io): that
// is the end of the file. With every slot taken it reads with ReadAt on a goroutine.
func (o aioImage) ReadAsync(off int64, size int, done func([]byte, error)) error {
	err := o.aio.start(off, size, func(p []byte, err error) {
		if errors.Is(err, syscall.EINVAL) {
			// on a goroutine: this is the completion goroutine, which GetSize would hold up
			go func() { done(nil, o.pastEnd(off, err)) }()
			return
		}
		done(p, err)
	})
	if !errors.Is(err, errNoSlot) {
		return err
	}
	// on a goroutine: the FUSE server starts reads from its request loop, which a read
	// waiting for an OSD would hold up (the server's bound of requests in flight bounds these)
	go func() {
		buf := make([]byte, size)
		n, err := o.ReadAt(buf, off)
		done(buf[:n], err)
	}()
	return nil
}

// pastEnd is io.EOF when a read at off that failed with err started at or after the image's
// end, else err.
func (o *openImage) pastEnd(off int64, err error) error {
	size, serr := o.img.GetSize()
	if serr == nil && off >= int64(size) {
		return io.EOF
	}
	return err
}

// WriteAt implements fusefile.Backend.
func (o *openImage) WriteAt(p []byte, off int64) (int, error) { return o.img.WriteAt(p, off) }

// Flush implements fusefile.Backend: what librbd's cache holds reaches the OSDs.
func (o *openImage) Flush() error { return o.img.Flush() }

// Size implements fusefile.Backend.
func (o *openImage) Size() (int64, error) {
	size, err := o.img.GetSize()
	return int64(size), err
}

// Discard implements fusefile.Discarder: discards of the loop device (fstrim) give the space
// back to the cluster.
func (o *openImage) Discard(off, length int64) error {
	_, err := o.img.Discard(uint64(off), uint64(length))
	return err
}

// offline answers the last requests of a connection whose image is not open (see
// DetachResuming): everything fails, nothing is claimed done.
type offline struct{}

var errOffline = errors.New("image not open")

func (offline) ReadAt([]byte, int64) (int, error)  { return 0, syscall.EIO }
func (offline) WriteAt([]byte, int64) (int, error) { return 0, syscall.EIO }
func (offline) Flush() error                       { return syscall.EIO }
func (offline) Size() (int64, error)               { return 0, errOffline }
