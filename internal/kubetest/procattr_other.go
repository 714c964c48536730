//go:build !linux

package kubetest

import (
	"os"
	"syscall"
)

var sigTerm os.Signal = os.Interrupt

func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, sig os.Signal) { _ = p.Signal(sig) }
