package faults

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testGuardNamesDeadDaemon: a test tier run under `ceph-local.sh guard` is ended within a minute
// of the OSD's death, and the guard names the daemon, its crash dump and the backtrace in its
// log, instead of leaving the tier's tests to fail one by one on Ceph timeouts. SIGSEGV goes
// through Ceph's own crash handler, as the memstore crash in snapshot trimming did.
func testGuardNamesDeadDaemon(t *testing.T, c *cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// the tier: a shell whose child would outlive it if the guard ended only the shell
	cmd := exec.CommandContext(ctx, script(t), "guard", "bash", "-c", "sleep 600 & wait")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, c.base...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	start := time.Now()
	c.signal(t, "osd.0", syscall.SIGSEGV)
	err := cmd.Wait()
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 75 {
		t.Errorf("guard ended with %v, want exit status 75 (a daemon died)\n%s", err, stderr.String())
	}
	if took > time.Minute {
		t.Errorf("the guard ended the tier %v after the OSD died, want within a minute", took)
	}
	out := stderr.String()
	for _, want := range []string{"CEPH DAEMON DIED: osd.0", "crash dump: " + c.dir + "/crash/", "Caught signal (Segmentation fault)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the guard's report lacks %q:\n%s", want, out)
		}
	}
	if b, err := exec.Command("pgrep", "-f", "^sleep 600$").Output(); err == nil {
		t.Errorf("the tier's processes outlived it: %s", b)
	}
	t.Logf("tier ended %.1f s after the OSD died; the report:\n%s", took.Seconds(), out)
	c.restart(t) // BlueStore: the OSD comes back with its data
}
