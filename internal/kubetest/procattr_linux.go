package kubetest

import (
	"os"
	"syscall"
)

var sigTerm os.Signal = syscall.SIGTERM

// sysProcAttr gives a process its own group (so its children stop with it) and has the kernel
// kill it when the test binary dies without running cleanups.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func signalGroup(p *os.Process, sig os.Signal) {
	_ = syscall.Kill(-p.Pid, sig.(syscall.Signal))
}
