package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
)

// TestCephFSNodeThroughTheHolder: the node reaches ceph-fuse in the holder, which announces it
// in its session metadata as the in-process mounter does (out-of-service fencing finds a lost
// node's sessions by it); a request of an older node plugin (no node) still mounts; a node ID
// that would smuggle other metadata keys in is refused before anything runs.
func TestCephFSNodeThroughTheHolder(t *testing.T) {
	for _, c := range []struct {
		name, node string
		want       string // the --client_metadata argument, "" for none
		refused    bool
	}{
		// short names: the work directory, named after the test, holds an admin socket (107 bytes)
		{name: "node", node: "worker-1.example", want: "--client_metadata=monoceph.node=worker-1.example"},
		{name: "old plugin", node: ""},
		{name: "separator", node: "worker-1,hostname=worker-2", refused: true},
		{name: "option", node: "a --admin_socket=/x", refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			x := &scripted{}
			cephfsHolder(t, state, x)
			cl, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
			if err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(state, "0123456789abcdef01234567")
			if err := os.Mkdir(work, 0o700); err != nil {
				t.Fatal(err)
			}
			req := mount.Request{Monitors: []string{"192.0.2.1:6789"}, FSName: "myfs", Path: "/volumes/csi/v/uuid",
				Target: filepath.Join(t.TempDir(), "staging"), Cred: testCred(t), WorkDir: work, Node: c.node}
			err = cl.CephFS(mount.NewFuse(x, 5*time.Second)).Mount(context.Background(), req)
			x.mu.Lock()
			calls := append([]string(nil), x.calls...)
			x.mu.Unlock()
			if c.refused {
				if !errors.Is(err, ceph.ErrInvalid) || len(calls) != 0 {
					t.Fatalf("mount: %v, ran %q; want ErrInvalid and nothing run", err, calls)
				}
				return
			}
			if err != nil || len(calls) != 1 {
				t.Fatalf("mount: %v, ran %q", err, calls)
			}
			var got []string
			for _, a := range strings.Fields(calls[0]) {
				if strings.HasPrefix(a, "--client_metadata") {
					got = append(got, a)
				}
			}
			if want := fmt.Sprint(strings.Fields(c.want)); fmt.Sprint(got) != want {
				t.Errorf("ceph-fuse metadata arguments %q, want %s", got, want)
			}
		})
	}
}

// TestHolderFeatures: a holder says what it does, so a node plugin tells an older holder, which
// would ignore the node, from one that announces it.
func TestHolderFeatures(t *testing.T) {
	state := t.TempDir()
	cephfsHolder(t, state, &scripted{})
	cl, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := cl.Hello(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		info Info
		typ  string
		want string
	}{
		{"this holder", h, "cephfs", "[]"},
		{"an older CephFS holder", Info{Version: 1, Type: "cephfs"}, "cephfs", "[" + FeatureCephFSNode + "]"},
		{"an older RBD holder", Info{Version: 1, Type: "rbd"}, "rbd", "[]"},
	} {
		if got := fmt.Sprint(c.info.Missing(c.typ)); got != c.want {
			t.Errorf("%s: missing %s, want %s", c.name, got, c.want)
		}
	}
}
