package kubetest

import "syscall"

// sysProcAttr has the kernel kill the control plane when the test binary dies without running
// cleanups (go test -timeout panics, SIGKILL), so no etcd or apiserver outlives the run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
