package hostexec

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReapOrphans: this process made a child subreaper (as the first process of a PID
// namespace is), an orphan left by a command becomes its zombie child and is reaped; a
// command Run is still waiting for is not, and Run gets its exit status.
func TestReapOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	x := New(10 * time.Second)
	ctx := context.Background()
	// the shell prints the orphan's PID and exits at once, as a mount helper does
	out, err := x.Run(ctx, "sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	// a command Run waits for meanwhile, exiting while the reaper looks
	done := make(chan error, 1)
	go func() {
		_, err := x.Run(ctx, "sh", "-c", "sleep 0.5; exit 3")
		done <- err
	}()
	var reaped []int
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(reaped, orphan); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d not reaped (reaped %v)", orphan, reaped)
		}
		reaped = append(reaped, ReapOrphans("/proc")...)
	}
	for range 20 {
		reaped = append(reaped, ReapOrphans("/proc")...)
		time.Sleep(30 * time.Millisecond)
	}
	if err := <-done; ExitCode(err) != 3 {
		t.Fatalf("Run of a command while reaping: %v, want exit status 3 (reaped %v)", err, reaped)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(orphan)); err == nil {
		t.Fatalf("orphan %d still has a process entry", orphan)
	}
}
