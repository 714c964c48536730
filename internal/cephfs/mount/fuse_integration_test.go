package mount

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
)

// TestFuseLifecycle mounts the local cluster's filesystem with ceph-fuse, sees the mount break
// when its daemon is killed, clears it, and mounts two daemons side by side (each with its own
// admin socket, which a shared one would make fail with "(33) Numerical argument out of
// domain").
func TestFuseLifecycle(t *testing.T) {
	env := cephtest.Env(t)
	base, err := os.MkdirTemp("", "cfsm") // short: admin socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	x := hostexec.New(30 * time.Second)
	f := NewFuse(x, 10*time.Second)
	ctx := context.Background()

	mountOne := func(name string) Request {
		r := Request{Monitors: []string{env.Monitors}, FSName: env.FSName, Path: "/", Cred: env.Admin,
			Target: filepath.Join(base, name, "mnt"), WorkDir: filepath.Join(base, name, "work")}
		for _, d := range []string{r.Target, r.WorkDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() {
			_ = exec.Command("umount", "-l", r.Target).Run()
			for _, pid := range must(FuseDaemons("/proc", FuseSocket(r.WorkDir))) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
		if err := f.Mount(ctx, r); err != nil {
			t.Fatalf("Mount: %v", err)
		}
		return r
	}
	a, b := mountOne("a"), mountOne("b")
	for _, r := range []Request{a, b} {
		state, m, err := Inspect(ctx, r.Target, 5*time.Second)
		if err != nil || state != Healthy || m.FsType != FsTypeFuse {
			t.Fatalf("Inspect(%s) = %v, %+v, %v", r.Target, state, m, err)
		}
	}

	pids := must(FuseDaemons("/proc", FuseSocket(a.WorkDir)))
	if len(pids) != 1 {
		t.Fatalf("daemons of a: %v", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := hostexec.StopDaemons(ctx, "/proc", "ceph-fuse", "--admin_socket="+FuseSocket(a.WorkDir), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if state, _, err := Inspect(ctx, a.Target, 5*time.Second); err != nil || state != Broken {
		t.Fatalf("Inspect after the kill = %v, %v; want broken", state, err)
	}
	if state, _, err := Inspect(ctx, b.Target, 5*time.Second); err != nil || state != Healthy {
		t.Fatalf("the other mount after the kill = %v, %v", state, err)
	}
	if err := hostmount.LazyUnmount(ctx, x, a.Target); err != nil {
		t.Fatal(err)
	}
	if state, _, err := Inspect(ctx, a.Target, 5*time.Second); err != nil || state != NotMounted {
		t.Fatalf("Inspect after the lazy unmount = %v, %v", state, err)
	}
	// a clean unmount: the daemon exits by itself and Release finds nothing to stop
	if err := hostmount.UnmountOrDetach(ctx, x, b.Target); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(ctx, b.WorkDir); err != nil {
		t.Fatal(err)
	}
	if pids := must(FuseDaemons("/proc", FuseSocket(b.WorkDir))); len(pids) > 0 {
		t.Fatalf("daemons after Release: %v", pids)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
