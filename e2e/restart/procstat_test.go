package restart

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procUsage is a process's CPU time and context switches so far, all threads together.
type procUsage struct {
	cpu      time.Duration
	switches float64
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux architecture
// Go supports (the kernel scales to it whatever its own HZ).
const clockTick = 10 * time.Millisecond

// readUsage reads pid's user + system time (/proc/<pid>/stat, fields 14 and 15, the whole
// process) and its threads' voluntary and involuntary context switches (/proc/<pid>/task/*/
// status: a thread's counts end with it, and Go seldom ends threads).
func readUsage(pid int) (procUsage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, err
	}
	// the command name may hold spaces: fields count from after its closing parenthesis
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 13 {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u := procUsage{cpu: time.Duration(utime+stime) * clockTick}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, t := range tasks {
		s, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for _, l := range strings.Split(string(s), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				u.switches += n
			}
		}
	}
	return u, nil
}
