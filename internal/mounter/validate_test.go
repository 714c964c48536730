package mounter

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/fusefile"
	"github.com/monoceph/monoceph/internal/rbd/attach"
)

// scriptedRBDHolder starts an RBD holder whose commands are x, in stateDir.
func scriptedRBDHolder(t *testing.T, stateDir string, x *scripted) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Listen(ctx, ServerOptions{Endpoint: "unix://" + filepath.Join(stateDir, "mounter.sock"), Type: "rbd",
		RBD: attach.NewFuse(x, nil), StateDir: stateDir, Binary: "test"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { s.Shutdown(time.Second) }) })
}

// TestHolderRevalidates: the holder checks what it is asked as the node plugin does, rather
// than trusting it was checked: a work directory that leads out of the state directory through
// a symbolic link, mount options the node plugin would refuse, a descriptor that is not
// /dev/fuse, and a FUSE directory outside the work directory (RBD detach unmounts and removes
// it) are refused or ignored, and nothing outside the state directory is touched.
func TestHolderRevalidates(t *testing.T) {
	const work = "0123456789abcdef01234567"
	for _, c := range []struct {
		name string
		typ  string
		// ask sends the request; outside is a directory outside the state directory
		ask  func(ctx context.Context, cl *Client, state, outside string) error
		want error // nil: accepted
	}{
		{"symlinked work dir", "cephfs", func(ctx context.Context, cl *Client, state, outside string) error {
			if err := os.Symlink(outside, filepath.Join(state, work)); err != nil {
				return err
			}
			return cl.CephFS(mount.NewFuse(&scripted{}, time.Second)).Mount(ctx, cephfsReq(t, filepath.Join(state, work), nil))
		}, ceph.ErrInvalid},
		{"reserved option", "cephfs", func(ctx context.Context, cl *Client, state, _ string) error {
			return cl.CephFS(mount.NewFuse(&scripted{}, time.Second)).Mount(ctx, cephfsReq(t, mkdir(t, state, work), []string{"--client_metadata=monoceph.node=other"}))
		}, ceph.ErrInvalid},
		{"command-line flag", "cephfs", func(ctx context.Context, cl *Client, state, _ string) error {
			return cl.CephFS(mount.NewFuse(&scripted{}, time.Second)).Mount(ctx, cephfsReq(t, mkdir(t, state, work), []string{"--admin_socket=/tmp/x"}))
		}, ceph.ErrInvalid},
		{"allowed options", "cephfs", func(ctx context.Context, cl *Client, state, _ string) error {
			return cl.CephFS(mount.NewFuse(&scripted{}, time.Second)).Mount(ctx, cephfsReq(t, mkdir(t, state, work), []string{"--client_cache_size=1000", "noatime"}))
		}, nil},
		{"not /dev/fuse", "rbd", func(ctx context.Context, cl *Client, state, outside string) error {
			f, err := os.Create(filepath.Join(outside, "not-fuse"))
			if err != nil {
				return err
			}
			defer f.Close()
			a := attach.Attachment{Image: attach.Image{Pool: "rbd", Name: "csi-vol-x"}, WorkDir: mkdir(t, state, work)}
			_, err = cl.call(ctx, opRBDDetach, rbdDetach{Attachment: a, Resume: &fusefile.State{}}, f, nil, true)
			return err
		}, ceph.ErrInvalid},
		{"FUSE dir outside", "rbd", func(ctx context.Context, cl *Client, state, outside string) error {
			victim := mkdir(t, outside, "victim")
			a := attach.Attachment{Image: attach.Image{Pool: "rbd", Name: "csi-vol-x"}, WorkDir: mkdir(t, state, work), FuseDir: victim}
			_, err := cl.call(ctx, opRBDDetach, rbdDetach{Attachment: a}, nil, nil, true)
			if _, serr := os.Stat(victim); serr != nil {
				return errors.New("the holder removed a directory outside the state directory: " + serr.Error())
			}
			return err
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			state, outside := t.TempDir(), t.TempDir()
			if c.typ == "rbd" {
				scriptedRBDHolder(t, state, &scripted{})
			} else {
				cephfsHolder(t, state, &scripted{})
			}
			cl, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
			if err != nil {
				t.Fatal(err)
			}
			err = c.ask(context.Background(), cl, state, outside)
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
			if ents, _ := os.ReadDir(outside); c.typ == "cephfs" && len(ents) != 0 {
				t.Fatalf("the holder wrote outside the state directory: %v", ents)
			}
		})
	}
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func cephfsReq(t *testing.T, work string, options []string) mount.Request {
	return mount.Request{Monitors: []string{"192.0.2.1:6789"}, FSName: "myfs", Path: "/volumes/csi/v/uuid",
		Target: filepath.Join(t.TempDir(), "staging"), Cred: testCred(t), WorkDir: work, Options: options}
}
