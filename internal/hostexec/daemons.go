package hostexec

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Daemons returns the processes of program (the base name of argv[0]) that have arg among their
// arguments, found by their command line in proc (normally /proc). FUSE daemons are not
// children of this process (their helper forks them and exits), so this is how they are found
// again, also after a restart. A process that exited but was not reaped yet has an empty
// command line and does not count.
func Daemons(proc, program, arg string) ([]int, error) {
	return DaemonsMatching(proc, program, func(a string) bool { return a == arg })
}

// DaemonsMatching is Daemons for the processes of program with an argument match accepts.
func DaemonsMatching(proc, program string, match func(arg string) bool) ([]int, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(proc, e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue // gone meanwhile, or a zombie
		}
		argv := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if filepath.Base(string(argv[0])) != program {
			continue
		}
		for _, a := range argv[1:] {
			if match(string(a)) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, nil
}

// StopDaemons waits up to grace for the Daemons(proc, program, arg) to exit on their own (a
// FUSE daemon does once its mount is gone), then sends SIGTERM and, two seconds later,
// SIGKILL. It fails when one survives all that, or when ctx ends.
func StopDaemons(ctx context.Context, proc, program, arg string, grace time.Duration) error {
	return stopDaemons(ctx, proc, program, arg, func(a string) bool { return a == arg }, grace)
}

// StopDaemonsUnder is StopDaemons for the daemons of program with an argument argPrefix+path
// where path is under dir: the daemons of every mount of a state directory.
func StopDaemonsUnder(ctx context.Context, proc, program, argPrefix, dir string, grace time.Duration) error {
	dir = filepath.Clean(dir) + "/"
	return stopDaemons(ctx, proc, program, argPrefix+dir+"...", func(a string) bool {
		p, ok := strings.CutPrefix(a, argPrefix)
		return ok && strings.HasPrefix(filepath.Clean(p), dir)
	}, grace)
}

func stopDaemons(ctx context.Context, proc, program, what string, match func(string) bool, grace time.Duration) error {
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{0, grace}, {syscall.SIGTERM, 2 * time.Second}, {syscall.SIGKILL, 2 * time.Second}}
	for _, step := range steps {
		pids, err := DaemonsMatching(proc, program, match)
		if err != nil || len(pids) == 0 {
			return err
		}
		for _, pid := range pids {
			if step.sig != 0 {
				_ = syscall.Kill(pid, step.sig)
			}
		}
		err = waitGone(ctx, proc, program, match, step.wait)
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	pids, _ := DaemonsMatching(proc, program, match)
	return fmt.Errorf("%s daemons %v (%s) do not exit", program, pids, what)
}

func waitGone(ctx context.Context, proc, program string, match func(string) bool, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		pids, err := DaemonsMatching(proc, program, match)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %v still running", program, pids)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
