// Package faultpoint lets crash-safety tests kill the process at a named step of an operation.
//
// A test starts the driver (or a helper process) with MONOCEPH_FAULT_POINT=<name>; when the
// code reaches Hit(<name>) the process SIGKILLs itself, exactly as an OOM kill or a node
// failure would end it: no deferred cleanup runs. Without the variable Hit is one comparison.
package faultpoint

import (
	"os"
	"syscall"
)

// EnvVar names the fault point to die at.
const EnvVar = "MONOCEPH_FAULT_POINT"

var armed = os.Getenv(EnvVar)

// Hit kills the process if name is the armed fault point.
func Hit(name string) {
	if armed != "" && armed == name {
		if os.Getpid() == 1 {
			// the first process of a PID namespace (a container's entrypoint) ignores signals
			// from inside it, its own SIGKILL included; its exit takes the namespace down as
			// a kill would, and runs no deferred cleanup either
			syscall.Exit(137)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never return into the operation
	}
}
