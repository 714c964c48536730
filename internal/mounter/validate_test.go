package mounter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/fusefile"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"golang.org/x/sys/unix"
	mountutils "k8s.io/mount-utils"
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
		{"link target", "cephfs", func(ctx context.Context, cl *Client, state, outside string) error {
			link := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(outside, link); err != nil {
				return err
			}
			r := cephfsReq(t, mkdir(t, state, work), nil)
			r.Target = filepath.Join(link, "staging")
			return cl.CephFS(mount.NewFuse(&scripted{}, time.Second)).Mount(ctx, r)
		}, ceph.ErrInvalid},
		{"fs option", "cephfs", func(ctx context.Context, cl *Client, state, _ string) error {
			r := cephfsReq(t, mkdir(t, state, work), nil)
			r.FSName = "--client_mountpoint=/"
			return cl.CephFS(mount.NewFuse(&scripted{}, time.Second)).Mount(ctx, r)
		}, ceph.ErrInvalid},
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

// linkTree makes the symbolic links a mount target may meet: base/link -> base/real (a link on
// the way), base/real/leaf -> base/real (a link as the target) and base/real/dangling (a link
// to nothing).
func linkTree(t *testing.T) (base, real string) {
	t.Helper()
	base = t.TempDir()
	real = mkdir(t, base, "real")
	for link, to := range map[string]string{
		filepath.Join(base, "link"):     real,
		filepath.Join(real, "leaf"):     real,
		filepath.Join(real, "dangling"): filepath.Join(base, "nowhere"),
	} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}
	return base, real
}

// TestCephFSTargetChecks: the holder checks a CephFS mount's filesystem, directory and target
// as the node plugin does (issue 26, item 5): strict Ceph names, and a clean absolute target
// with no symbolic link on the way.
func TestCephFSTargetChecks(t *testing.T) {
	base, real := linkTree(t)
	const dir = "/volumes/csi/v/uuid"
	for _, c := range []struct {
		name, fs, dir, target string
		ok                    bool
	}{
		{"plain", "myfs", dir, filepath.Join(real, "staging"), true},
		{"existing directory", "myfs", dir, real, true},
		{"filesystem root", "myfs", "/", real, true},
		{"symlink in the middle", "myfs", dir, filepath.Join(base, "link", "staging"), false},
		{"symlink as the target", "myfs", dir, filepath.Join(real, "leaf"), false},
		{"relative", "myfs", dir, "staging", false},
		{"not clean", "myfs", dir, real + "/../real/staging", false},
		{"trailing slash", "myfs", dir, real + "/", false},
		{"filesystem name with an option", "myfs --client_mountpoint=/", dir, real, false},
		{"filesystem name with a comma", "myfs,x", dir, real, false},
		{"empty filesystem name", "", dir, real, false},
		{"directory out of the root", "myfs", "/volumes/../..", real, false},
		{"relative directory", "myfs", "volumes/csi", real, false},
	} {
		err := checkCephFSTarget(c.fs, c.dir, c.target)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ceph.ErrInvalid) {
			t.Errorf("%s: %v, want ok %v (ErrInvalid otherwise)", c.name, err, c.ok)
		}
	}
}

// TestNoSymlinksWithoutOpenat2: where openat2 is missing (kernels before 5.6) the holder walks
// the target component by component, and must judge every target as openat2 does.
func TestNoSymlinksWithoutOpenat2(t *testing.T) {
	base, real := linkTree(t)
	for _, c := range []struct {
		name, target string
		want         error // from the walk; checkNoSymlinks must agree on ok or not
	}{
		{"existing directory", real, nil},
		{"missing leaf", filepath.Join(real, "staging"), unix.ENOENT},
		{"missing in the middle", filepath.Join(real, "a", "b"), unix.ENOENT},
		{"symlink in the middle", filepath.Join(base, "link", "staging"), unix.ELOOP},
		{"symlink as the target", filepath.Join(real, "leaf"), unix.ELOOP},
		{"dangling symlink as the target", filepath.Join(real, "dangling"), unix.ELOOP},
		{"root", "/", nil},
	} {
		err := walkNoSymlinks(c.target)
		if !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("%s: walk %v, want %v", c.name, err, c.want)
		}
		if kernel := checkNoSymlinks(c.target); (kernel == nil) != !errors.Is(c.want, unix.ELOOP) {
			t.Errorf("%s: openat2 says %v, the walk %v", c.name, kernel, err)
		}
	}
}

// TestFuseConnection: a passed descriptor must serve the mount the request names, by the
// fuse_connection line of its fdinfo (Linux 6.13+) against the mount's device in the mount
// table; without the line (older kernels) only the /dev/fuse check stands.
func TestFuseConnection(t *testing.T) {
	at := func(major, minor int) *mountutils.MountInfo { return &mountutils.MountInfo{Major: major, Minor: minor} }
	for _, c := range []struct {
		name   string
		fdinfo string
		mount  *mountutils.MountInfo
		ok     bool
	}{
		{"the mount's connection", "pos:\t0\nflags:\t02\nmnt_id:\t20\nino:\t5\nfuse_connection:\t71\n", at(0, 71), true},
		{"another mount's connection", "pos:\t0\nfuse_connection:\t72\n", at(0, 71), false},
		{"a major number (kernel encoding)", "fuse_connection:\t" + fmt.Sprint(3<<20|5) + "\n", at(3, 5), true},
		{"C library encoding is not the kernel's", "fuse_connection:\t" + fmt.Sprint(3<<8|5) + "\n", at(3, 5), false},
		{"nothing mounted there", "fuse_connection:\t71\n", nil, false},
		{"garbage", "fuse_connection:\tx\n", at(0, 71), false},
		{"older kernel: no line", "pos:\t0\nflags:\t02\nmnt_id:\t20\n", at(0, 71), true},
		{"older kernel, nothing mounted", "pos:\t0\n", nil, true},
	} {
		err := connectionOf([]byte(c.fdinfo), c.mount, "/state/w/fuse")
		if (err == nil) != c.ok || err != nil && !errors.Is(err, ceph.ErrInvalid) {
			t.Errorf("%s: %v, want ok %v (ErrInvalid otherwise)", c.name, err, c.ok)
		}
	}
}

// fuseMountUnserved mounts a FUSE filesystem at dir on a new /dev/fuse descriptor that nobody
// serves (never stat it: that waits for an answer), and returns the descriptor; both go when
// the test ends.
func fuseMountUnserved(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("monoceph-test", dir, "fuse.monoceph-test", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", f.Fd())); err != nil {
		f.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close() // aborts the connection
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
	return f
}

// TestHolderRefusesAnotherMountsDescriptor: an RBD attach or detach that resumes a connection
// is refused when the descriptor passed serves another FUSE mount than the attachment's (the
// holder would serve or abort that other mount); the attachment's own passes the check.
func TestHolderRefusesAnotherMountsDescriptor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	if b, err := os.ReadFile("/proc/self/fdinfo/0"); err == nil && !strings.Contains(string(b), "mnt_id") {
		t.Skip("no fdinfo")
	}
	const work = "0123456789abcdef01234567"
	state, outside := t.TempDir(), t.TempDir()
	workDir := mkdir(t, state, work)
	own := fuseMountUnserved(t, mkdir(t, workDir, filepath.Base(fuseDirIn(workDir))))
	other := fuseMountUnserved(t, mkdir(t, outside, "other"))
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", own.Fd())); !strings.Contains(string(b), "fuse_connection:") {
		t.Skipf("this kernel's fdinfo does not name the FUSE connection (before 6.13):\n%s", b)
	}
	if err := checkFuseConnection(own, fuseDirIn(workDir)); err != nil {
		t.Fatalf("the attachment's own descriptor: %v", err)
	}
	scriptedRBDHolder(t, state, &scripted{})
	cl, err := NewClient("unix://" + filepath.Join(state, "mounter.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := attach.Attachment{Image: attach.Image{Pool: "rbd", Name: "csi-vol-x"}, WorkDir: workDir, FuseDir: fuseDirIn(workDir)}
	_, err = cl.call(ctx, opRBDDetach, rbdDetach{Attachment: a, Resume: &fusefile.State{}}, other, nil, true)
	if !errors.Is(err, ceph.ErrInvalid) || !strings.Contains(err.Error(), "not the mount at") {
		t.Errorf("detach with another mount's descriptor: %v, want refused", err)
	}
	_, err = cl.call(ctx, opRBDAttach, rbdAttach{Image: a.Image, MonHost: "192.0.2.1:6789", Cred: wireCred(testCred(t)), WorkDir: workDir,
		Resume: &fusefile.State{}}, other, nil, true)
	if !errors.Is(err, ceph.ErrInvalid) || !strings.Contains(err.Error(), "not the mount at") {
		t.Errorf("attach resuming another mount's descriptor: %v, want refused", err)
	}
}
