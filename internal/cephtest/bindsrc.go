package cephtest

import (
	"crypto/sha256"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

//go:embed shim/bindsrc.c
var bindSrcC []byte

var (
	shimOnce sync.Once
	shimPath string
	shimErr  error
)

// BindSrcEnv is the environment that makes a child process's Ceph clients connect from addr
// (another loopback address such as 127.0.0.2): an LD_PRELOAD shim, compiled once per test
// binary, binds every IPv4 socket to addr before it connects. Ceph's own options do not change
// the source address the OSDs see. Go's own sockets do not go through libc, so in a Go child
// only the librados connections move.
func BindSrcEnv(t testing.TB, addr string) []string {
	t.Helper()
	shimOnce.Do(func() {
		// named after its source, so every run reuses one file instead of leaving new ones
		shimPath = filepath.Join(os.TempDir(), fmt.Sprintf("monoceph-bindsrc-%x.so", sha256.Sum256(bindSrcC)))
		if _, err := os.Stat(shimPath); err == nil {
			return
		}
		dir, err := os.MkdirTemp("", "bindsrc-")
		if err != nil {
			shimErr = err
			return
		}
		defer os.RemoveAll(dir)
		src, so := filepath.Join(dir, "bindsrc.c"), filepath.Join(dir, "bindsrc.so")
		if shimErr = os.WriteFile(src, bindSrcC, 0o600); shimErr != nil {
			return
		}
		if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", so, src, "-ldl").CombinedOutput(); err != nil {
			shimErr = fmt.Errorf("gcc: %v: %s", err, out)
			return
		}
		shimErr = os.Rename(so, shimPath) // atomic: concurrent test binaries never load half a file
	})
	if shimErr != nil {
		t.Fatalf("building the source address shim: %v", shimErr)
	}
	return []string{"LD_PRELOAD=" + shimPath, "BIND_SRC=" + addr}
}
