package hostexec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// A process that is the first of its PID namespace (a container's entrypoint) inherits every
// orphan of the namespace: the FUSE daemons that mount helpers leave behind (ceph-fuse forks
// one and exits). When such a daemon exits, it stays a zombie until its new parent waits for
// it. ReapOrphans does that without taking the exit status of a command Run is waiting for:
// the commands Run started are known, and starting one and reaping exclude each other.

var (
	// spawn is held for reading while Run starts a command and records it, for writing while
	// ReapOrphans looks for zombies: a command between its start and its record is never
	// mistaken for an orphan.
	spawn sync.RWMutex
	ours  = &pidSet{m: map[int]bool{}}
)

type pidSet struct {
	mu sync.Mutex
	m  map[int]bool
}

func (s *pidSet) add(pid int)    { s.mu.Lock(); s.m[pid] = true; s.mu.Unlock() }
func (s *pidSet) remove(pid int) { s.mu.Lock(); delete(s.m, pid); s.mu.Unlock() }
func (s *pidSet) has(pid int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[pid]
}

func start(cmd *exec.Cmd) error {
	spawn.RLock()
	defer spawn.RUnlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	ours.add(cmd.Process.Pid)
	return nil
}

// ReapOrphans waits for the children of this process that exited and that Run did not start
// (orphans it inherited as the first process of its PID namespace), found in proc (normally
// /proc), and returns their PIDs.
func ReapOrphans(proc string) []int {
	spawn.Lock()
	defer spawn.Unlock()
	self := os.Getpid()
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil
	}
	var reaped []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || ours.has(pid) {
			continue
		}
		ppid, state, ok := parentAndState(filepath.Join(proc, e.Name(), "stat"))
		if !ok || ppid != self || state != 'Z' {
			continue
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			reaped = append(reaped, pid)
		}
	}
	return reaped
}

// parentAndState reads the parent PID and the state letter from a /proc/<pid>/stat file,
// whose second field (the command name, in parentheses) may itself hold blanks and ')'.
func parentAndState(path string) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	fields := bytes.Fields(b[i+2:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(fields[1]))
	return ppid, fields[0][0], err == nil
}
