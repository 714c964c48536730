package mounter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"google.golang.org/grpc/codes"
)

const testKey = "AQBr3V5kAAAAABAAbWFkZS11cCB0ZXN0IGtleQ=="

// scripted answers commands from a function and records them, with the key files they name.
type scripted struct {
	mu    sync.Mutex
	calls []string
	keys  []string
	run   func(name string, args []string) ([]byte, error)
}

func (s *scripted) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	s.mu.Lock()
	s.calls = append(s.calls, name+" "+strings.Join(args, " "))
	for i, a := range args {
		if a == "--keyfile" && i+1 < len(args) {
			b, _ := os.ReadFile(args[i+1])
			s.keys = append(s.keys, string(b))
		}
	}
	run := s.run
	s.mu.Unlock()
	if run == nil {
		return nil, nil
	}
	return run(name, args)
}

// cephfsHolder starts a CephFS holder whose ceph-fuse is x, in a fresh state directory.
func cephfsHolder(t *testing.T, stateDir string, x hostexec.Executor) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Listen(ctx, ServerOptions{Endpoint: "unix://" + filepath.Join(stateDir, "mounter.sock"), Type: "cephfs",
		CephFS: mount.NewFuse(x, 5*time.Second), StateDir: stateDir, Binary: "test"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { s.Shutdown(time.Second) }) })
	return s
}

func testCred(t *testing.T) ceph.Credentials {
	t.Helper()
	c, err := ceph.NewCredentials("node", testKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCephFSThroughTheHolder: a mount request reaches ceph-fuse in the holder with the key in
// a file only; the holder's errors keep their class (a missing path is NOT_FOUND at the node's
// edge, as without a holder); a work directory outside the state directory is refused before
// anything runs; Running and Release answer.
func TestCephFSThroughTheHolder(t *testing.T) {
	state := t.TempDir()
	x := &scripted{}
	cephfsHolder(t, state, x)
	c, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
	if err != nil {
		t.Fatal(err)
	}
	m := c.CephFS(mount.NewFuse(x, 5*time.Second))
	ctx := context.Background()
	work := filepath.Join(state, "0123456789abcdef01234567")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	req := mount.Request{Monitors: []string{"192.0.2.1:6789"}, FSName: "myfs", Path: "/volumes/csi/v/uuid", Target: filepath.Join(t.TempDir(), "staging"),
		Cred: testCred(t), WorkDir: work}
	if err := m.Mount(ctx, req); err != nil {
		t.Fatal(err)
	}
	x.mu.Lock()
	calls, keys := append([]string(nil), x.calls...), append([]string(nil), x.keys...)
	x.mu.Unlock()
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "ceph-fuse "+req.Target) || strings.Contains(calls[0], testKey) {
		t.Fatalf("holder ran %q", calls)
	}
	if len(keys) != 1 || keys[0] != testKey {
		t.Fatalf("key files read: %d", len(keys))
	}

	x.mu.Lock()
	x.run = func(name string, args []string) ([]byte, error) {
		return []byte("ceph mount failed with (2) No such file or directory"), &hostexec.CommandError{Name: name, Args: args, ExitCode: 1,
			Output: "ceph mount failed with (2) No such file or directory", Err: errors.New("exit status 1")}
	}
	x.mu.Unlock()
	err = m.Mount(ctx, req)
	if !errors.Is(err, ceph.ErrNotFound) || ceph.CodeOf(err) != codes.NotFound {
		t.Fatalf("a failed mount: %v (code %v), want ceph.ErrNotFound", err, ceph.CodeOf(err))
	}

	outside := req
	outside.WorkDir = t.TempDir()
	x.mu.Lock()
	n := len(x.calls)
	x.mu.Unlock()
	if err := m.Mount(ctx, outside); !errors.Is(err, ceph.ErrInvalid) {
		t.Fatalf("a work directory outside the state directory: %v, want ErrInvalid", err)
	}
	if running, err := m.Running(ctx, outside.WorkDir); err == nil || running {
		t.Fatalf("Running outside the state directory = %v, %v", running, err)
	}
	x.mu.Lock()
	if len(x.calls) != n {
		t.Fatalf("a refused request ran %q", x.calls[n:])
	}
	x.mu.Unlock()
	if running, err := m.Running(ctx, work); err != nil || running {
		t.Fatalf("Running = %v, %v; want false (no daemon)", running, err)
	}
	if err := m.Release(ctx, work); err != nil {
		t.Fatal(err)
	}
}

// TestHolderRestart: the client's watch sees the first holder, notices it stop and finds the
// next one; a second holder waits for the first to let go of the lock; without a holder
// requests fail as UNAVAILABLE (the CO retries) rather than hang.
func TestHolderRestart(t *testing.T) {
	state := t.TempDir()
	endpoint := "unix://" + filepath.Join(state, "mounter.sock")
	first := cephfsHolder(t, state, &scripted{})
	c, err := NewClient(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan Info, 4)
	go c.Watch(ctx, func(_ context.Context, h Info) { seen <- h })
	if h := next(t, seen); h.Instance != first.Instance() || h.Version != Version || h.Type != "cephfs" {
		t.Fatalf("first holder seen as %+v", h)
	}

	// a successor started meanwhile waits for the lock
	started := make(chan *Server, 1)
	go func() {
		lctx, lcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer lcancel()
		s, err := Listen(lctx, ServerOptions{Endpoint: endpoint, Type: "cephfs", CephFS: mount.NewFuse(&scripted{}, time.Second), StateDir: state})
		if err != nil {
			t.Error(err)
		}
		started <- s
	}()
	select {
	case <-started:
		t.Fatal("a second holder listened while the first held the lock")
	case <-time.After(300 * time.Millisecond):
	}
	stopped := time.Now()
	first.Shutdown(time.Second)
	second := <-started
	if second == nil {
		t.FailNow()
	}
	go func() { _ = second.Serve() }()
	t.Cleanup(func() { second.Shutdown(time.Second) })
	if h := next(t, seen); h.Instance != second.Instance() {
		t.Fatalf("after the restart the watch saw %+v, want %s", h, second.Instance())
	}
	t.Logf("the watch found the next holder %v after the first stopped", time.Since(stopped).Round(time.Millisecond))

	second.Shutdown(time.Second)
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start := time.Now()
	if _, err := c.Hello(rctx); !errors.Is(err, ErrUnavailable) || time.Since(start) > time.Second {
		t.Fatalf("request without a holder: %v after %v, want ErrUnavailable at once", err, time.Since(start))
	}
}

func next(t *testing.T, seen <-chan Info) Info {
	t.Helper()
	select {
	case h := <-seen:
		return h
	case <-time.After(5 * time.Second):
		t.Fatal("the watch reported no holder")
	}
	return Info{}
}

// TestEncryptedNeedsTheFeature: an encrypted image is never attached through a holder that does
// not announce FeatureRBDEncryption (an older one would ignore the key and serve ciphertext).
func TestEncryptedNeedsTheFeature(t *testing.T) {
	for _, tt := range []struct {
		name     string
		features []string
		want     string
	}{
		{"older holder", []string{FeatureCephFSNode}, "cannot open encrypted volumes (rbd.encryption)"},
		{"this holder", features, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			saved := features
			features = tt.features
			t.Cleanup(func() { features = saved })
			state := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := Listen(ctx, ServerOptions{Endpoint: "unix://" + filepath.Join(state, "mounter.sock"), Type: "rbd",
				RBD: attach.NewFuse(hostexec.New(time.Second), nil), StateDir: state})
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = s.Serve() }()
			t.Cleanup(func() { s.Shutdown(time.Second) })
			c, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
			if err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(state, "0123456789abcdef01234567")
			if err := os.Mkdir(work, 0o700); err != nil {
				t.Fatal(err)
			}
			_, err = c.RBD(nil).Attach(ctx, attach.Request{Image: attach.Image{Pool: "rbd", Name: "img"}, WorkDir: work,
				Encryption: &attach.Encryption{Passphrase: []byte("pw")}})
			var unavailable *attach.UnavailableError
			if tt.want != "" {
				if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want an UnavailableError saying %q", err, tt.want)
				}
				return
			}
			// this holder takes the request (and fails later, without a cluster or a pool)
			if errors.As(err, &unavailable) && strings.Contains(err.Error(), FeatureRBDEncryption) {
				t.Fatalf("a holder with the feature was refused: %v", err)
			}
		})
	}
}
