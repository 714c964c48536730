package cephtest

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Freeze stops process pid (SIGSTOP), a Ceph daemon or a FUSE daemon, as a hung one behaves:
// alive, connected, answering nothing. It resumes (SIGCONT) when the returned function is
// called or the test ends, whichever is first, so a failing test never leaves it stopped.
func Freeze(t testing.TB, pid int) (resume func()) {
	t.Helper()
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("freezing process %d: %v", pid, err)
	}
	return resume
}

// Threads is the number of threads of this process: what a call blocked in the kernel or in
// librados holds until it returns.
func Threads(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}
