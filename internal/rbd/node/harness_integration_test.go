package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"k8s.io/mount-utils"
)

// recorder runs commands on the host and keeps every command line, so tests can show that no
// credential was ever passed on one.
type recorder struct {
	x     hostexec.Executor
	mu    sync.Mutex
	calls [][]string
	slow  []string // commands that took more than a second
}

func (r *recorder) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	r.mu.Lock()
	r.calls = append(r.calls, append([]string{name}, args...))
	r.mu.Unlock()
	start := time.Now()
	out, err := r.x.Run(ctx, name, args...)
	if d := time.Since(start); d > time.Second {
		r.mu.Lock()
		r.slow = append(r.slow, fmt.Sprintf("%s %s took %v", name, strings.Join(args, " "), d.Round(time.Millisecond)))
		r.mu.Unlock()
	}
	return out, err
}

// ranWith counts the commands name run with args first.
func (r *recorder) ranWith(name string, args ...string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c[0] == name && len(c) > len(args) && slices.Equal(c[1:1+len(args)], args) {
			n++
		}
	}
	return n
}

// rig is a node server on the local Ceph cluster.
type rig struct {
	t    *testing.T
	s    *Server
	cl   cephtest.Cluster
	conn *ceph.Conn
	rec  *recorder
	ctx  context.Context
}

func newRig(t *testing.T) *rig {
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("staging needs root (FUSE, loop devices, mounts)")
	}
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	conn, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	rec := &recorder{x: hostexec.New(time.Minute)}
	r := &rig{t: t, s: newTestServer(t, cl.ClusterMap(), rec), cl: cl, conn: conn, rec: rec, ctx: ctx}
	r.s.opts.Pool = p // the node records its addresses and checks who holds an image
	key := cl.Admin.Key()
	t.Cleanup(func() {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, c := range rec.calls {
			if strings.Contains(strings.Join(c, " "), key) {
				t.Errorf("the key appears on a command line: %q", c[0])
			}
		}
	})
	return r
}

// image creates an RBD image for the test and removes it afterwards.
func (r *rig) image(namespace string, size uint64) attach.Image {
	t := r.t
	img := attach.Image{Pool: r.cl.RBDPool, Namespace: namespace, Name: fmt.Sprintf("node-test-%d", time.Now().UnixNano())}
	r.librbd("create "+img.Name, func(io *rados.IOContext) error {
		if namespace != "" {
			io.SetNamespace("")
			if err := rbd.NamespaceCreate(io, namespace); err != nil && !errors.Is(err, rados.ErrObjectExists) && !strings.Contains(err.Error(), "exist") {
				return err
			}
			io.SetNamespace(namespace)
		}
		opts := rbd.NewRbdImageOptions()
		defer opts.Destroy()
		return rbd.CreateImage(io, img.Name, size, opts)
	}, namespace)
	t.Cleanup(func() {
		// the rbd-fuse daemon of the last unstage may still be closing the image
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := r.tryLibrbd(func(io *rados.IOContext) error { return rbd.RemoveImage(io, img.Name) }, namespace)
			if err == nil || errors.Is(err, rbd.ErrNotFound) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("removing image %s: %v", img.Spec(), err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		if namespace != "" {
			_ = r.tryLibrbd(func(io *rados.IOContext) error { io.SetNamespace(""); return rbd.NamespaceRemove(io, namespace) }, namespace)
		}
	})
	return img
}

func (r *rig) tryLibrbd(fn func(*rados.IOContext) error, namespace string) error {
	_, err := ceph.Call(context.Background(), r.conn, "librbd", func(c *rados.Conn) (struct{}, error) {
		io, err := c.OpenIOContext(r.cl.RBDPool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		io.SetNamespace(namespace)
		return struct{}{}, fn(io)
	})
	return err
}

func (r *rig) librbd(what string, fn func(*rados.IOContext) error, namespace string) {
	r.t.Helper()
	if err := r.tryLibrbd(fn, namespace); err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
}

// resize grows an image the way ControllerExpandVolume does.
func (r *rig) resize(img attach.Image, size uint64) {
	r.librbd("resize", func(io *rados.IOContext) error {
		im, err := rbd.OpenImage(io, img.Name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer im.Close()
		return im.Resize(size)
	}, img.Namespace)
}

func (r *rig) volumeContext(img attach.Image) map[string]string {
	return volumecontext.Image{ClusterID: r.cl.ID, Pool: img.Pool, Namespace: img.Namespace, Name: img.Name, Mounter: volumecontext.MounterFuse}.Map()
}

func (r *rig) stage(volumeID, staging string, img attach.Image, vc *csi.VolumeCapability) error {
	_, err := r.s.NodeStageVolume(r.ctx, &csi.NodeStageVolumeRequest{
		VolumeId: volumeID, StagingTargetPath: staging, VolumeCapability: vc,
		VolumeContext: r.volumeContext(img), Secrets: r.cl.Secrets(),
	})
	return err
}

func (r *rig) unstage(volumeID, staging string) error {
	_, err := r.s.NodeUnstageVolume(r.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: staging})
	return err
}

func (r *rig) publish(volumeID, staging, target string, vc *csi.VolumeCapability, readOnly bool) error {
	_, err := r.s.NodePublishVolume(r.ctx, &csi.NodePublishVolumeRequest{
		VolumeId: volumeID, StagingTargetPath: staging, TargetPath: target, VolumeCapability: vc, Readonly: readOnly,
	})
	return err
}

func (r *rig) unpublish(volumeID, target string) error {
	_, err := r.s.NodeUnpublishVolume(r.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: target})
	return err
}

// workspace is a directory for staging and target paths. Whatever a failed test leaves
// mounted or attached under it (or under the server's state directory) is torn down before
// the directories are removed: a recursive removal must never walk into a live rbd-fuse
// mount.
func (r *rig) workspace(volumeID string, targets ...string) string {
	base := r.t.TempDir()
	r.t.Cleanup(func() {
		for _, tgt := range targets {
			_ = r.unpublish(volumeID, filepath.Join(base, tgt))
		}
		if err := r.unstage(volumeID, filepath.Join(base, "staging")); err != nil {
			// what forceCleanup then finds is explained here (a loop device another mount
			// namespace holds open, say)
			r.t.Logf("cleanup: unstage %s: %v", volumeID, err)
		}
		forceCleanup(r.t, base, r.s.opts.StateDir)
	})
	return base
}

// forceCleanup lazily unmounts everything under the roots and detaches loop devices whose
// backing files are there (and read-only layers over those).
func forceCleanup(t *testing.T, roots ...string) {
	under := func(p string) bool {
		for _, root := range roots {
			if p == root || strings.HasPrefix(p, root+"/") {
				return true
			}
		}
		return false
	}
	own := map[string]bool{}
	for _, root := range roots {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			own["/"+attach.FuseFileName(filepath.Join(root, e.Name()))] = true
		}
	}
	infos, _ := mount.ParseMountInfo(hostmount.MountInfoPath)
	var mounts []string
	for _, m := range infos {
		if under(m.MountPoint) {
			mounts = append(mounts, m.MountPoint)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(mounts))) // deepest first
	for _, m := range mounts {
		t.Logf("cleanup: unmounting leftover %s", m)
		_ = exec.Command("umount", "--lazy", m).Run()
	}
	var loops, layers []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		backing := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(b)), "(deleted)"))
		// a loop device on a lazily unmounted FUSE mount names its file from that mount's
		// root: "/vol-<work directory>" (only this test's: other tests' devices are not ours)
		if under(backing) || own[backing] {
			loops = append(loops, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, l := range loops {
			if strings.TrimSpace(string(b)) == l {
				layers = append(layers, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
			}
		}
	}
	for _, l := range append(layers, loops...) {
		t.Logf("cleanup: detaching leftover %s", l)
		_ = exec.Command("losetup", "--detach", l).Run()
	}
}

// leftovers lists mounts and loop devices under root.
func leftovers(root string) []string {
	var out []string
	infos, _ := mount.ParseMountInfo(hostmount.MountInfoPath)
	for _, m := range infos {
		if strings.HasPrefix(m.MountPoint, root+"/") {
			out = append(out, "mount "+m.MountPoint)
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), root+"/") {
			out = append(out, "loop "+f)
		}
	}
	return out
}

// assertNoKeyOnDisk fails when a key file is left in the state directory or any file there
// holds the key. rbd-fuse mounts are not entered.
func (r *rig) assertNoKeyOnDisk() {
	r.t.Helper()
	key := r.cl.Admin.Key()
	err := filepath.WalkDir(r.s.opts.StateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if m, _ := hostmount.MountAt(p); m != nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasPrefix(d.Name(), "keyfile-") {
			r.t.Errorf("key file left behind: %s", p)
		}
		if d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), key) {
				r.t.Errorf("%s holds the key", p)
			}
		}
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
}
