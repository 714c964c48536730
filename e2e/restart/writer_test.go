package restart

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/monoceph/monoceph/internal/cephtest"
)

const (
	writerEnv    = "MONOCEPH_RESTART_WRITER"
	writerPrefix = "writer: "
	recordSize   = 4096
	// writeEvery is the writer's pace.
	writeEvery = 100 * time.Millisecond
)

// TestHelperWriter is the application of a pod when the test runs it as a helper: in a mount
// namespace of its own it bind-mounts the publish target (as the container runtime does),
// lets go of the node's other mounts, and
// writes and fsyncs one numbered record every 100 ms, each at its own offset, saying what
// happened to each; after an error it opens the file again and retries the same record. It
// stops when its stdin closes.
func TestHelperWriter(t *testing.T) {
	spec := os.Getenv(writerEnv)
	if spec == "" {
		t.Skip("helper process only")
	}
	parts := strings.Split(spec, "|")
	target, mnt, shared := parts[0], parts[1], parts[2]
	if err := unix.Mount(target, mnt, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		say("fatal bind %s: %v", target, err)
		return
	}
	// a container's namespace holds its own volumes only (the runtime drops the copy of the
	// host's mounts it started from); this one started as a copy of the node's, whose
	// mounts it would otherwise keep, other volumes' too, after the node unmounts them
	if err := unix.Unmount(shared, unix.MNT_DETACH); err != nil {
		say("fatal unmount %s: %v", shared, err)
		return
	}
	// and other tests' mounts, which this copy would pin while it lives
	if out, err := exec.Command("/bin/sh", "-c", cephtest.DropOtherMounts, "sh", mnt).CombinedOutput(); err != nil {
		say("fatal dropping other mounts: %v: %s", err, out)
		return
	}
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	path := filepath.Join(mnt, "records")
	var f *os.File
	for seq := 0; ; {
		select {
		case <-stop:
			return
		case <-time.After(writeEvery):
		}
		var err error
		if f == nil {
			f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
		}
		if err == nil {
			if _, err = f.WriteAt(record(seq), int64(seq)*recordSize); err == nil {
				err = f.Sync()
			}
		}
		now := time.Now().UnixNano()
		if err != nil {
			say("err %d %d %v", seq, now, err)
			if f != nil {
				f.Close()
				f = nil
			}
			continue
		}
		say("ok %d %d", seq, now)
		seq++
	}
}

func say(format string, a ...any) { fmt.Printf(writerPrefix+format+"\n", a...) }

func record(seq int) []byte {
	b := bytes.Repeat([]byte{byte('a' + seq%26)}, recordSize)
	copy(b, fmt.Sprintf("record %d\n", seq))
	return b
}

// writer is a running writer helper and what it reported.
type writer struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	done chan struct{}

	mu     sync.Mutex
	events []event
	fatal  string
}

type event struct {
	ok  bool
	seq int
	at  time.Time
	err string
}

// startWriter runs a writer on v's publish target in a mount namespace with the propagation
// a pod's container gets: "private" (the default, mountPropagation: None) or "slave"
// (HostToContainer).
func (r *rig) startWriter(name string, v *volume, propagation string) *writer {
	r.t.Helper()
	mnt := filepath.Join(r.dir, "pod-"+name)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", propagation, "--",
		os.Args[0], "-test.run=^TestHelperWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), writerEnv+"="+v.target+"|"+mnt+"|"+r.root)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	w := &writer{name: name, cmd: cmd, in: in, done: make(chan struct{})}
	go func() {
		for l := range lines(out, writerPrefix) {
			w.record(l)
		}
		_ = cmd.Wait()
		close(w.done)
	}()
	r.t.Cleanup(w.stop)
	w.waitOK(r.t, 3, 30*time.Second)
	return w
}

func (w *writer) record(l string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var kind string
	var seq int
	var ns int64
	if _, err := fmt.Sscanf(l, "%s %d %d", &kind, &seq, &ns); err != nil {
		w.fatal = l
		return
	}
	e := event{ok: kind == "ok", seq: seq, at: time.Unix(0, ns)}
	if !e.ok {
		e.err = l
	}
	w.events = append(w.events, e)
}

// stop ends the writer (its stdin closes) and waits for it.
func (w *writer) stop() {
	w.in.Close()
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// oks is the number of records written so far.
func (w *writer) oks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.ok {
			n++
		}
	}
	return n
}

// waitOK waits for n more successful writes.
func (w *writer) waitOK(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	want := w.oks() + n
	for deadline := time.Now().Add(timeout); w.oks() < want; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("writer %s: %d records, want %d (%s)", w.name, w.oks(), want, w.summary(time.Time{}))
		}
		w.mu.Lock()
		fatal := w.fatal
		w.mu.Unlock()
		if fatal != "" {
			t.Fatalf("writer %s: %s", w.name, fatal)
		}
	}
}

// report summarises the writes from since on: how many, how many errors (and the first), the
// longest time between two successful writes, and when writing resumed after the last error.
type report struct {
	oks, errs int
	firstErr  string
	longest   time.Duration
	// resumed is the time from since to the first successful write after the last error
	resumed time.Duration
}

func (w *writer) report(since time.Time) report {
	w.mu.Lock()
	defer w.mu.Unlock()
	var r report
	last := since
	lastErr := -1
	for i, e := range w.events {
		if e.at.Before(since) {
			continue
		}
		if !e.ok {
			r.errs++
			if r.firstErr == "" {
				r.firstErr = e.err
			}
			lastErr = i
			continue
		}
		r.oks++
		r.longest = max(r.longest, e.at.Sub(last))
		last = e.at
	}
	for _, e := range w.events[lastErr+1:] {
		if e.ok && !e.at.Before(since) {
			r.resumed = e.at.Sub(since)
			break
		}
	}
	return r
}

func (w *writer) summary(since time.Time) string {
	r := w.report(since)
	return fmt.Sprintf("%d writes, %d errors (first: %q), longest pause %v", r.oks, r.errs, r.firstErr, r.longest.Round(time.Millisecond))
}

// written is the highest record number written.
func (w *writer) written() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, e := range w.events {
		if e.ok {
			n = max(n, e.seq+1)
		}
	}
	return n
}

// verify checks that the volume holds every record the writer wrote, read at the publish
// target from this namespace.
func (w *writer) verify(t *testing.T, v *volume) {
	t.Helper()
	n := w.written()
	b, err := os.ReadFile(filepath.Join(v.target, "records"))
	if err != nil {
		t.Fatalf("%s: reading the records back: %v", w.name, err)
	}
	for i := range n {
		if len(b) < (i+1)*recordSize || !bytes.Equal(b[i*recordSize:(i+1)*recordSize], record(i)) {
			t.Fatalf("%s: record %d of %d is not in the volume", w.name, i, n)
		}
	}
	t.Logf("%s: all %d records written are in the volume", w.name, n)
}
