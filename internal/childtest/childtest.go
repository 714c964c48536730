// Package childtest runs the test binary again as a helper process that executes one test
// function and talks to the test in lines: a Ceph client from another source address, a
// client that never reads its streams. What the helper holds (connections, goroutines,
// memory) is then not counted as the process under test's. It also runs one to a fault point
// (package faultpoint) for crash-safety tests.
package childtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/faultpoint"
)

// Prefix starts every line a helper writes for the test; other output (test logs) passes by.
const Prefix = "helper: "

// Child is a running helper.
type Child struct {
	in    io.WriteCloser
	lines chan string
}

// Command is the test binary run again for the test function named test, with env added to
// this process's environment. Its temporary directories go under a directory of its own
// (TMPDIR) that t removes when it ends: a helper that is SIGKILLed on purpose never removes
// its own. That directory is a short one directly in the system's temporary directory, not
// under t.TempDir(): the helper's directories carry its test's name after it, and a unix
// socket there (a helper's csi.sock) must fit in the 108 bytes of a socket address, which
// the parent's (sub)test name in the path overran.
func Command(t testing.TB, test string, env ...string) *exec.Cmd {
	t.Helper()
	dir, err := os.MkdirTemp("", "child")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "TMPDIR="+dir), env...)
	return cmd
}

// RunToFaultPoint runs the test function named test with env added and the fault point
// point armed, and fails t unless the helper died by SIGKILL, as faultpoint.Hit kills it: a
// helper that ends any other way did not reach the point (or crashed before it), and the
// state the test checks next would prove nothing. The failure shows the helper's output.
func RunToFaultPoint(t testing.TB, test, point string, env ...string) {
	t.Helper()
	cmd := Command(t, test, append(env, faultpoint.EnvVar+"="+point)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child %s at %s: %v, want death by SIGKILL; output:\n%s", test, point, err, out)
	}
}

// Start runs the test function named test (which must skip itself unless its environment
// says it is the helper) with env added to this process's environment. The helper's stdin
// closes, and the helper is waited for (killed after 30 s), when t ends.
func Start(t testing.TB, test string, env ...string) *Child {
	t.Helper()
	cmd := Command(t, test, env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{in: in, lines: make(chan string, 64)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), Prefix); ok {
				c.lines <- line
			}
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return c
}

// Next returns the helper's next line, failing t when none comes within d.
func (c *Child) Next(t testing.TB, d time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatal("helper process exited")
		}
		return line
	case <-time.After(d):
		t.Fatalf("helper process said nothing for %v", d)
	}
	return ""
}

// Send writes one line to the helper's stdin.
func (c *Child) Send(t testing.TB, format string, a ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", a...); err != nil {
		t.Fatal(err)
	}
}

// Say writes one line for the test, from the helper's side.
func Say(format string, a ...any) { fmt.Printf(Prefix+format+"\n", a...) }
