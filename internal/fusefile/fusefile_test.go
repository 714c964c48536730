package fusefile

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/childtest"
	"golang.org/x/sys/unix"
)

// fileBackend shows a local file: what the tests serve instead of an RBD image.
type fileBackend struct {
	*os.File
	discards [][2]int64
	mu       sync.Mutex
}

func (b *fileBackend) Flush() error { return b.Sync() }
func (b *fileBackend) Size() (int64, error) {
	fi, err := b.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
func (b *fileBackend) Discard(off, length int64) error {
	b.mu.Lock()
	b.discards = append(b.discards, [2]int64{off, length})
	b.mu.Unlock()
	return unix.Fallocate(int(b.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
}

func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts, loop devices)")
	}
	for _, p := range []string{"/dev/fuse", "/dev/loop-control"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("needs %s: %v", p, err)
		}
	}
}

func openBackend(t *testing.T, path string, size int64) *fileBackend {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if size > 0 {
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { f.Close() })
	return &fileBackend{File: f}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// loopOn puts a loop device on file and undoes it when the test ends.
func loopOn(t *testing.T, file string) string {
	t.Helper()
	dev := run(t, "losetup", "--find", "--show", file)
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	return dev
}

func mountExt4(t *testing.T, dev, dir string) {
	t.Helper()
	run(t, "mkfs.ext4", "-q", "-E", "nodiscard", dev)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", dev, dir)
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
}

func unmountFUSE(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Unmount(dir, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		t.Fatalf("unmount %s: %v", dir, err)
	}
}

// TestFileThroughLoopDevice: the file serves a loop device carrying ext4 (write, fsync, read
// back after dropping caches), shows its backend's size, lists in its directory, turns the
// loop device's discards into the backend's, refuses unlink and truncation, and the server
// ends when the file system is unmounted.
func TestFileThroughLoopDevice(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	b := openBackend(t, filepath.Join(dir, "backing"), 64<<20)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := Mount(mnt, Options{Name: "img", Subtype: "fusefile-test"}, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if s.State().Minor < minMinor {
		t.Fatalf("negotiated minor %d", s.State().Minor)
	}
	file := filepath.Join(mnt, "img")
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != 64<<20 || !fi.Mode().IsRegular() {
		t.Fatalf("stat %s: %v, %v", file, fi, err)
	}
	if names, err := os.ReadDir(mnt); err != nil || len(names) != 1 || names[0].Name() != "img" {
		t.Fatalf("directory lists %v, %v", names, err)
	}
	if err := os.Remove(file); err == nil {
		t.Fatal("unlink of the file succeeded")
	}
	if err := os.Truncate(file, 1<<20); err == nil {
		t.Fatal("truncating the file succeeded")
	}
	// the size is asked each time: a grown backend shows at once
	if err := b.Truncate(80 << 20); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(file); fi.Size() != 80<<20 {
		t.Fatalf("size after growing the backend: %d", fi.Size())
	}

	dev := loopOn(t, file)
	fsdir := filepath.Join(dir, "fs")
	mountExt4(t, dev, fsdir)
	data := make([]byte, 3<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fsdir, "data"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "sync", "-f", filepath.Join(fsdir, "data"))
	run(t, "umount", fsdir)
	run(t, "mount", dev, fsdir)
	if got, err := os.ReadFile(filepath.Join(fsdir, "data")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("data read back after a remount differs (%v)", err)
	}
	if err := os.Remove(filepath.Join(fsdir, "data")); err != nil {
		t.Fatal(err)
	}
	run(t, "fstrim", fsdir)
	b.mu.Lock()
	trimmed := len(b.discards)
	b.mu.Unlock()
	if trimmed == 0 {
		t.Error("fstrim reached the backend with no discard")
	}
	run(t, "umount", fsdir)
	run(t, "losetup", "--detach", dev)
	unmountFUSE(t, mnt)
	select {
	case <-s.Done():
		if !errors.Is(s.Err(), ErrUnmounted) {
			t.Fatalf("server ended with %v, want ErrUnmounted", s.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server still running after the unmount")
	}
}

// helperEnv makes a child test process the first server of a connection.
const helperEnv = "MONOCEPH_FUSEFILE_HELPER"

// TestHelperServe is the first server when run as a helper: it mounts the backend named by
// the environment, says its pid and /dev/fuse descriptor, and serves until killed.
func TestHelperServe(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	backing, mnt, _ := strings.Cut(spec, ":")
	f, err := os.OpenFile(backing, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Mount(mnt, Options{Name: "img", Subtype: "fusefile-test"}, &fileBackend{File: f})
	if err != nil {
		t.Fatal(err)
	}
	childtest.Say("serving %d %d %d", os.Getpid(), s.f.Fd(), s.State().Minor)
	<-s.Done()
}

// writer writes and fsyncs one numbered 4 KiB record after another into a file on ext4 on the
// loop device, as an application does, and records every error and the longest wait.
type writer struct {
	f       *os.File
	mu      sync.Mutex
	n       int
	errs    []error
	last    time.Time
	longest time.Duration
}

func startWriter(t *testing.T, path string) (w *writer, stop func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w = &writer{f: f, last: time.Now()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w.mu.Lock()
			i := w.n
			w.mu.Unlock()
			_, err := f.WriteAt(record(i), int64(i)*4096)
			if err == nil {
				err = f.Sync()
			}
			w.mu.Lock()
			if err != nil {
				w.errs = append(w.errs, err)
			} else {
				w.n++
				w.longest = max(w.longest, time.Since(w.last))
				w.last = time.Now()
			}
			w.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return w, func() { cancel(); <-done; f.Close() }
}

func record(i int) []byte {
	b := bytes.Repeat([]byte{byte(i)}, 4096)
	copy(b, fmt.Sprintf("record %d\n", i))
	return b
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// waitRecords waits until the writer wrote n more records.
func (w *writer) waitRecords(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	want := w.count() + n
	deadline := time.Now().Add(timeout)
	for w.count() < want {
		if time.Now().After(deadline) {
			t.Fatalf("writer stuck at %d records, want %d (errors: %v)", w.count(), want, w.errs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestResumeAfterTheServerDies is the property the package exists for: a loop device on the
// file, ext4 on it and an application writing and fsyncing. The first server (another
// process) is SIGKILLed while this test holds a duplicate of its /dev/fuse descriptor, as the
// node plugin does; the writes wait in the kernel, a new server resumes the connection (and
// the requests the dead one had read are sent again), and the application sees no error and
// the same loop device. A graceful handover (Stop, Resume) follows; then, with the last
// descriptor closed, the connection ends and the device fails (what happens without anybody
// keeping it).
func TestResumeAfterTheServerDies(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	backing := filepath.Join(dir, "backing")
	b := openBackend(t, backing, 64<<20)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	child := childtest.Start(t, "TestHelperServe", helperEnv+"="+backing+":"+mnt)
	var pid, fd int
	var minor uint32
	if _, err := fmt.Sscanf(child.Next(t, 30*time.Second), "serving %d %d %d", &pid, &fd, &minor); err != nil {
		t.Fatal(err)
	}
	custody := takeDescriptor(t, pid, fd)

	dev := loopOn(t, filepath.Join(mnt, "img"))
	fsdir := filepath.Join(dir, "fs")
	mountExt4(t, dev, fsdir)
	// run first on failure: with no server left, the writes of the unmounts below would wait
	// forever; without the connection they fail at once
	var current *Server
	t.Cleanup(func() {
		if current == nil || isDone(current) {
			custody.Close()
		}
	})
	w, stop := startWriter(t, filepath.Join(fsdir, "log"))
	w.waitRecords(t, 20, 30*time.Second)

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // writes wait meanwhile
	before := w.count()
	s, err := Resume(custody, State{Minor: minor}, Options{Name: "img"}, b)
	if err != nil {
		t.Fatal(err)
	}
	current = s
	w.waitRecords(t, 20, 30*time.Second)
	t.Logf("server killed after %d records, resumed; longest wait between two records %v", before, w.longest)

	// graceful: the server stops, a successor resumes
	if err := s.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	current = nil
	s2, err := Resume(custody, State{Minor: minor}, Options{Name: "img"}, b)
	if err != nil {
		t.Fatal(err)
	}
	current = s2
	w.waitRecords(t, 20, 30*time.Second)
	stop()
	if len(w.errs) > 0 {
		t.Fatalf("the application saw %d errors: %v", len(w.errs), w.errs)
	}
	if err := loopBacks(dev, filepath.Join(mnt, "img")); err != nil {
		t.Error(err)
	}
	// every record made it to the backend, through a remount of ext4
	run(t, "umount", fsdir)
	run(t, "mount", dev, fsdir)
	got, err := os.ReadFile(filepath.Join(fsdir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.n {
		if !bytes.Equal(got[i*4096:(i+1)*4096], record(i)) {
			t.Fatalf("record %d of %d differs after the remount", i, w.n)
		}
	}
	run(t, "umount", fsdir)

	// nobody keeps the connection: it ends, and the device with it
	if err := s2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	current = nil
	custody.Close()
	buf := make([]byte, 4096)
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := unix.Pread(int(f.Fd()), buf, 8<<20); err == nil {
		t.Error("the loop device still reads with every descriptor of its connection closed")
	}
}

// takeDescriptor duplicates descriptor fd of process pid into this process (pidfd_getfd).
func takeDescriptor(t *testing.T, pid, fd int) *os.File {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	nfd, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(nfd), "/dev/fuse")
	t.Cleanup(func() { f.Close() })
	return f
}

func isDone(s *Server) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// loopBacks checks that loop device dev reads file (the same device and inode), without
// looking at other loop devices (losetup --associated stats every device's backing file, and
// waits forever on one whose FUSE server is stopped).
func loopBacks(dev, file string) error {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return err
	}
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := unix.IoctlLoopGetStatus64(int(f.Fd()))
	if err != nil {
		return err
	}
	if info.Device != st.Dev || info.Inode != st.Ino {
		return fmt.Errorf("%s reads device %d inode %d, not %s (%d/%d)", dev, info.Device, info.Inode, file, st.Dev, st.Ino)
	}
	return nil
}

// asyncBackend answers reads from goroutines of its own, after a delay, as librbd's aio does
// from its threads; it counts the reads and the most in flight at once.
type asyncBackend struct {
	*fileBackend
	fail                  bool // every read fails with EIO
	mu                    sync.Mutex
	reads, inflight, most int
}

func (b *asyncBackend) ReadAsync(off int64, size int, done func([]byte, error)) error {
	b.mu.Lock()
	b.reads++
	b.inflight++
	b.most = max(b.most, b.inflight)
	b.mu.Unlock()
	go func() {
		time.Sleep(2 * time.Millisecond)
		p := make([]byte, size)
		n, err := b.ReadAt(p, off)
		if b.fail {
			n, err = 0, syscall.EIO
		}
		b.mu.Lock()
		b.inflight--
		b.mu.Unlock()
		done(p[:n], err)
	}()
	return nil
}

// TestAsyncReads: a backend with ReadAsync serves every read through it, concurrent reads get
// their own bytes, the reads in flight stay within the server's bound, and a failed read
// fails in the reader.
func TestAsyncReads(t *testing.T) {
	needFUSE(t)
	tests := []struct {
		name string
		fail bool
	}{{"reads", false}, {"failing reads", true}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			const size = 16 << 20
			b := &asyncBackend{fileBackend: openBackend(t, filepath.Join(dir, "backing"), 0), fail: tc.fail}
			want := make([]byte, size)
			if _, err := rand.Read(want); err != nil {
				t.Fatal(err)
			}
			if _, err := b.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			fd := serveAndOpen(t, dir, b)
			pread := func(p []byte, off int64) (int, error) {
				n, err := unix.Pread(fd, p, off)
				return max(n, 0), err
			}
			const readers, per, bs = 2 * inflightMax, 4, 64 << 10
			var wg sync.WaitGroup
			errs := make(chan error, readers*per)
			for r := 0; r < readers; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p := make([]byte, bs)
					for i := 0; i < per; i++ {
						off := int64((r*per+i)*bs) % (size - bs)
						n, err := pread(p, off)
						switch {
						case tc.fail && !errors.Is(err, syscall.EIO):
							errs <- fmt.Errorf("read at %d: %v, want EIO", off, err)
						case !tc.fail && (err != nil || !bytes.Equal(p[:n], want[off:off+bs])):
							errs <- fmt.Errorf("read at %d: %d bytes, %v, or other bytes than written", off, n, err)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// the end of the file: a short read, then none
			p := make([]byte, 8192)
			if n, err := pread(p, size-4096); !tc.fail && (n != 4096 || !bytes.Equal(p[:n], want[size-4096:])) {
				t.Errorf("read across the end: %d bytes, %v", n, err)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.reads < readers*per {
				t.Errorf("%d reads through ReadAsync, want at least %d", b.reads, readers*per)
			}
			if b.most > inflightMax {
				t.Errorf("%d reads in flight at once, want at most %d", b.most, inflightMax)
			}
		})
	}
}

// doneAndFailBackend breaks ReadAsync's contract: it answers the read and returns an error.
type doneAndFailBackend struct{ *fileBackend }

func (b doneAndFailBackend) ReadAsync(off int64, size int, done func([]byte, error)) error {
	p := make([]byte, size)
	n, err := b.ReadAt(p, off)
	done(p[:n], err)
	return syscall.EIO
}

// TestAsyncReadDoneAndError: a backend that both calls done and returns an error must not
// release the request twice (a second receive from the request slots would stop the loop, a
// second WaitGroup.Done would panic): reads go on being answered.
func TestAsyncReadDoneAndError(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	b := doneAndFailBackend{openBackend(t, filepath.Join(dir, "backing"), 0)}
	want := bytes.Repeat([]byte("monoceph"), 1024)
	if _, err := b.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	fd := serveAndOpen(t, dir, b)
	for i := 0; i < 3; i++ {
		read := make(chan error, 1)
		go func() {
			p := make([]byte, 4096)
			n, err := unix.Pread(fd, p, 4096)
			if err == nil && !bytes.Equal(p[:n], want[4096:8192]) {
				err = fmt.Errorf("%d bytes, not those written", n)
			}
			read <- err
		}()
		select {
		case err := <-read:
			if err != nil {
				t.Fatalf("read %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("read %d not answered after 10 s", i)
		}
	}
}

// serveAndOpen serves b as the file img of a FUSE mount below dir and opens it read-only; the
// descriptor is closed, then the mount removed, when the test ends. Not os.Open: Go's poller
// would register the file with epoll, whose FUSE_POLL request then waits for this process's
// own server while holding the epoll instance the server's read needs (a deadlock of the test
// process with itself).
func serveAndOpen(t *testing.T, dir string, b Backend) int {
	t.Helper()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Mount(mnt, Options{Name: "img", Subtype: "fusefile-test"}, b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountFUSE(t, mnt) })
	fd, err := unix.Open(filepath.Join(mnt, "img"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
