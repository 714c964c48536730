package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/nodestate"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

const (
	rwx      = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
	readerRO = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
)

// mustWrite writes a file and syncs it: a ceph-fuse daemon killed later must not take the data
// with it.
func mustWrite(t *testing.T, path, content string) {
	t.Helper()
	f, err := os.Create(path)
	if err == nil {
		_, err = f.WriteString(content)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path, want string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != want {
		t.Fatalf("%s = %q, %v; want %q", path, b, err, want)
	}
}

func wantEROFS(t *testing.T, path string) {
	t.Helper()
	err := os.WriteFile(path, []byte("x"), 0o644)
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("writing %s: %v, want EROFS", path, err)
	}
}

// TestFuseStagePublishRWX: stage with ceph-fuse, publish read-write and read-only on two nodes,
// see each other's writes, stats show the quota, and unpublish/unstage leave nothing behind.
func TestFuseStagePublishRWX(t *testing.T) {
	env := cephtest.Env(t)
	group := testGroup(t, env)
	const size = 100 << 20
	root := subvolume(t, env, group, "rwx", size)
	a, b := newTestNode(t, env, "node-a"), newTestNode(t, env, "node-b")
	const vol = "vol-rwx"
	vc := volumeContext(env, root, nil)
	ctx := context.Background()

	start := time.Now()
	if err := a.stage(t, vol, vc, rwx); err != nil {
		t.Fatalf("NodeStageVolume: %v", err)
	}
	staged := time.Since(start)
	start = time.Now()
	if err := a.stage(t, vol, vc, rwx); err != nil {
		t.Fatalf("second NodeStageVolume: %v", err)
	}
	t.Logf("stage %v, repeated stage %v", staged, time.Since(start))

	t.Run("key handling", func(t *testing.T) {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(a.daemon(t, vol)), "cmdline"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(cmdline), env.Admin.Key()) {
			t.Fatal("the key is on ceph-fuse's command line")
		}
		if !strings.Contains(string(cmdline), "--admin_socket="+mount.FuseSocket(a.workDir(vol))) {
			t.Fatalf("ceph-fuse runs without its own admin socket: %q", cmdline)
		}
		if files, _ := filepath.Glob(filepath.Join(a.workDir(vol), "keyfile-*")); len(files) > 0 {
			t.Fatalf("key files left after stage: %v", files)
		}
		fi, err := os.Stat(filepath.Join(a.workDir(vol), nodestate.RecoveryKeyName))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("recovery key: %v, %v", fi, err)
		}
		rec, err := os.ReadFile(nodestate.RecordPath(a.stagingPath(vol)))
		if err != nil || strings.Contains(string(rec), env.Admin.Key()) {
			t.Fatalf("record: %v (holds the key: %v)", err, strings.Contains(string(rec), env.Admin.Key()))
		}
	})

	t.Run("conflicts", func(t *testing.T) {
		other := volumeContext(env, root+"x", nil)
		wantCode(t, a.stage(t, vol, other, rwx), codes.AlreadyExists, "other arguments")
		_, err := a.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vol, StagingTargetPath: filepath.Join(a.dir, "elsewhere"),
			VolumeContext: vc, VolumeCapability: mountCapability(rwx), Secrets: env.Secrets()})
		wantCode(t, err, codes.FailedPrecondition, "already staged at")
	})

	if err := a.publish(t, vol, "writer", rwx, false, nil); err != nil {
		t.Fatalf("NodePublishVolume: %v", err)
	}
	if err := a.publish(t, vol, "writer", rwx, false, nil); err != nil {
		t.Fatalf("repeated NodePublishVolume: %v", err)
	}
	wantCode(t, a.publish(t, vol, "writer", rwx, true, nil), codes.AlreadyExists, "already published read-write")
	mustWrite(t, filepath.Join(a.targetPath(vol, "writer"), "from-a"), "hello from a")

	// a second node: its own staging, its own daemon, the same subvolume; it lets the node
	// choose the mounter, and this node has no kernel CephFS
	auto := volumeContext(env, root, func(v *volumecontext.Volume) { v.Mounter = "" })
	if err := b.stage(t, vol, auto, rwx); err != nil {
		t.Fatalf("node b: NodeStageVolume: %v", err)
	}
	if err := b.publish(t, vol, "pod", rwx, false, nil); err != nil {
		t.Fatalf("node b: NodePublishVolume: %v", err)
	}
	if rec, err := readRecord(b.stagingPath(vol)); err != nil || rec.Mounter != mount.NameFuse && !kernelCephFS() {
		t.Fatalf("node b's record: %+v, %v", rec, err)
	}
	mustRead(t, filepath.Join(b.targetPath(vol, "pod"), "from-a"), "hello from a")
	mustWrite(t, filepath.Join(b.targetPath(vol, "pod"), "from-b"), "hello from b")
	mustRead(t, filepath.Join(a.targetPath(vol, "writer"), "from-b"), "hello from b")

	// read-only: the readonly flag, and a reader-only access mode
	if err := a.publish(t, vol, "reader", rwx, true, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, filepath.Join(a.targetPath(vol, "reader"), "from-b"), "hello from b")
	wantEROFS(t, filepath.Join(a.targetPath(vol, "reader"), "x"))
	if err := b.publish(t, vol, "reader", readerRO, false, nil); err != nil {
		t.Fatal(err)
	}
	wantEROFS(t, filepath.Join(b.targetPath(vol, "reader"), "from-a"))

	t.Run("stats show the quota", func(t *testing.T) {
		for _, p := range []string{a.targetPath(vol, "writer"), a.stagingPath(vol)} {
			st, err := a.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: p})
			if err != nil {
				t.Fatal(err)
			}
			bytes := st.GetUsage()[0]
			if bytes.GetUnit() != csi.VolumeUsage_BYTES || bytes.GetTotal() != size || bytes.GetAvailable() <= 0 || bytes.GetAvailable() > size {
				t.Fatalf("stats of %s: %v, want total %d", p, st, size)
			}
		}
		_, err := a.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: filepath.Join(a.dir, "nowhere")})
		wantCode(t, err, codes.NotFound, "not published at")
		h, err := a.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol, VolumePublishPath: a.targetPath(vol, "writer")})
		if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 0 {
			t.Fatalf("health: %v, %v", h, err)
		}
	})

	// CSI has the CO unpublish first
	_, err := a.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: a.stagingPath(vol)})
	wantCode(t, err, codes.FailedPrecondition, "still published")

	for _, pod := range []string{"writer", "reader"} {
		a.unpublish(t, vol, pod)
		a.unpublish(t, vol, pod) // idempotent
		if _, err := os.Stat(a.targetPath(vol, pod)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("target %s after unpublish: %v", pod, err)
		}
	}
	workDir := a.workDir(vol)
	start = time.Now()
	a.unstage(t, vol)
	t.Logf("unstage %v", time.Since(start))
	a.unstage(t, vol) // idempotent
	if pids, _ := mount.FuseDaemons("/proc", mount.FuseSocket(workDir)); len(pids) > 0 {
		t.Fatalf("ceph-fuse %v still runs after unstage", pids)
	}
	for _, p := range []string{workDir, nodestate.RecordPath(a.stagingPath(vol))} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s after unstage: %v", p, err)
		}
	}
	if m, _ := hostmount.MountAt(a.stagingPath(vol)); m != nil {
		t.Fatal("staging path still mounted")
	}
	wantCode(t, a.publish(t, vol, "late", rwx, false, nil), codes.FailedPrecondition, "is not staged")
	// node b is unaffected by node a's unstage
	mustRead(t, filepath.Join(b.targetPath(vol, "pod"), "from-a"), "hello from a")
	b.unpublish(t, vol, "pod")
	b.unpublish(t, vol, "reader")
	b.unstage(t, vol)
}

// TestFuseRecovery kills the ceph-fuse daemon of a staged, published volume and checks that
// NodePublishVolume, NodeStageVolume and Recover each detect the broken mount, remount it,
// bind the targets again and make the data readable; and that without any key the publish
// fails instead of reporting success on the broken mount.
func TestFuseRecovery(t *testing.T) {
	env := cephtest.Env(t)
	group := testGroup(t, env)
	root := subvolume(t, env, group, "recovery", 64<<20)
	n, writer := newTestNode(t, env, "node"), newTestNode(t, env, "writer")
	const vol = "vol-recovery"
	ctx := context.Background()
	vc := volumeContext(env, root, nil)
	if err := n.stage(t, vol, vc, rwx); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"p1", "p2"} {
		if err := n.publish(t, vol, pod, rwx, pod == "p2", nil); err != nil {
			t.Fatal(err)
		}
	}
	// The data comes from another client. Files a killed client held exclusive capabilities on
	// (it wrote them) stay blocked for every client until the MDS times the dead session out
	// (session_timeout, 60 s): CephFS behaviour a remount cannot change, and not what this test
	// is about.
	if err := writer.stage(t, vol, vc, rwx); err != nil {
		t.Fatal(err)
	}
	if err := writer.publish(t, vol, "w", rwx, false, nil); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(writer.targetPath(vol, "w"), "data"), "survives")
	mustRead(t, filepath.Join(n.targetPath(vol, "p1"), "data"), "survives")

	broken := func(t *testing.T) {
		t.Helper()
		n.killDaemon(t, vol)
		for _, p := range []string{n.stagingPath(vol), n.targetPath(vol, "p1")} {
			if _, err := os.Stat(p); !mount.IsBroken(err) {
				t.Fatalf("stat %s after the kill: %v, want ENOTCONN", p, err)
			}
		}
	}
	healed := func(t *testing.T, how string, took time.Duration) {
		t.Helper()
		mustWrite(t, filepath.Join(writer.targetPath(vol, "w"), how), how)
		mustRead(t, filepath.Join(n.targetPath(vol, "p1"), "data"), "survives")
		mustRead(t, filepath.Join(n.targetPath(vol, "p2"), how), how)
		if err := unix.Access(n.targetPath(vol, "p1"), unix.W_OK); err != nil {
			t.Fatalf("read-write target after the remount: %v", err)
		}
		wantEROFS(t, filepath.Join(n.targetPath(vol, "p2"), "data"))
		t.Logf("%s: remounted and re-bound 2 targets in %v", how, took)
	}

	t.Run("publish", func(t *testing.T) {
		broken(t)
		h, err := n.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: vol})
		if err != nil || len(h.GetVolumeHealth().GetHealthStatuses()) != 1 ||
			h.GetVolumeHealth().GetHealthStatuses()[0].GetStatus() != csi.VolumeHealthErrorType_INACCESSIBLE {
			t.Fatalf("health of a broken mount: %v, %v", h, err)
		}
		_, err = n.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: vol, VolumePath: n.targetPath(vol, "p1")})
		wantCode(t, err, codes.FailedPrecondition, "is broken")
		start := time.Now()
		// no secrets: the recovery key remounts
		if err := n.publish(t, vol, "p1", rwx, false, nil); err != nil {
			t.Fatalf("NodePublishVolume on a broken mount: %v", err)
		}
		healed(t, "publish", time.Since(start))
	})

	t.Run("stage", func(t *testing.T) {
		broken(t)
		start := time.Now()
		if err := n.stage(t, vol, volumeContext(env, root, nil), rwx); err != nil {
			t.Fatalf("NodeStageVolume on a broken mount: %v", err)
		}
		healed(t, "stage", time.Since(start))
	})

	t.Run("Recover", func(t *testing.T) {
		broken(t)
		start := time.Now()
		if err := n.Recover(ctx); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		healed(t, "Recover", time.Since(start))
		// a healthy node: Recover changes nothing
		pid := n.daemon(t, vol)
		if err := n.Recover(ctx); err != nil || n.daemon(t, vol) != pid {
			t.Fatalf("Recover of a healthy node: %v (daemon %d → %d)", err, pid, n.daemon(t, vol))
		}
	})

	t.Run("no key: publish fails, secrets then remount", func(t *testing.T) {
		if err := os.Remove(filepath.Join(n.workDir(vol), nodestate.RecoveryKeyName)); err != nil {
			t.Fatal(err)
		}
		broken(t)
		wantCode(t, n.publish(t, vol, "p1", rwx, false, nil), codes.FailedPrecondition, "no key to remount")
		if _, err := os.Stat(n.targetPath(vol, "p1")); !mount.IsBroken(err) {
			t.Fatalf("target after the failed publish: %v", err)
		}
		if err := n.Recover(ctx); err == nil || !strings.Contains(err.Error(), "no recovery key") {
			t.Fatalf("Recover without a key: %v", err)
		}
		start := time.Now()
		if err := n.publish(t, vol, "p1", rwx, false, env.Secrets()); err != nil {
			t.Fatalf("NodePublishVolume with secrets: %v", err)
		}
		healed(t, "publish with secrets", time.Since(start))
	})

	for _, pod := range []string{"p1", "p2"} {
		n.unpublish(t, vol, pod)
	}
	n.unstage(t, vol)
	writer.unpublish(t, vol, "w")
	writer.unstage(t, vol)
}

// TestUnstageBrokenMount: a volume whose daemon died unstages cleanly.
func TestUnstageBrokenMount(t *testing.T) {
	env := cephtest.Env(t)
	group := testGroup(t, env)
	root := subvolume(t, env, group, "broken", 16<<20)
	n := newTestNode(t, env, "node")
	const vol = "vol-broken"
	if err := n.stage(t, vol, volumeContext(env, root, nil), rwx); err != nil {
		t.Fatal(err)
	}
	if err := n.publish(t, vol, "p", rwx, false, nil); err != nil {
		t.Fatal(err)
	}
	n.killDaemon(t, vol)
	n.unpublish(t, vol, "p")
	n.unstage(t, vol)
	if m, _ := hostmount.MountAt(n.stagingPath(vol)); m != nil {
		t.Fatal("staging path still mounted")
	}
	if _, err := os.Stat(n.workDir(vol)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("work directory after unstage: %v", err)
	}
}

// TestStageFailures: what cannot be mounted fails with the spec's code and leaves no record,
// no mount and no daemon behind.
func TestStageFailures(t *testing.T) {
	env := cephtest.Env(t)
	n := newTestNode(t, env, "node")
	tests := []struct {
		name string
		vc   map[string]string
		code codes.Code
		msg  string
	}{
		{name: "missing subvolume", vc: volumeContext(env, "/volumes/nonexistent/sub/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", nil),
			code: codes.NotFound, msg: "No such file or directory"},
		{name: "kernel client asked for", vc: volumeContext(env, "/volumes", func(v *volumecontext.Volume) { v.Mounter = volumecontext.MounterKernel }),
			code: codes.FailedPrecondition, msg: `mounter "kernel" is not available`},
	}
	if kernelCephFS() {
		tests = tests[:1]
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vol := "vol-" + strings.ReplaceAll(tt.name, " ", "-")
			wantCode(t, n.stage(t, vol, tt.vc, rwx), tt.code, tt.msg)
			if _, err := os.Stat(nodestate.RecordPath(n.stagingPath(vol))); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("record after a failed stage: %v", err)
			}
			if _, err := os.Stat(n.workDir(vol)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("work directory after a failed stage: %v", err)
			}
			if pids, _ := mount.FuseDaemons("/proc", mount.FuseSocket(n.workDir(vol))); len(pids) > 0 {
				t.Errorf("daemons after a failed stage: %v", pids)
			}
			if m, _ := hostmount.MountAt(n.stagingPath(vol)); m != nil {
				t.Error("mounted after a failed stage")
			}
		})
	}
}

// kernelCephFS reports whether this machine's kernel has CephFS.
func kernelCephFS() bool {
	b, _ := os.ReadFile("/proc/filesystems")
	return strings.Contains(string(b), "\tceph\n")
}
