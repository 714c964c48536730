package kubetest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// Process is a long-running child of a test (a control plane component, or a container the
// e2e test runs for a pod) with its output in a log file.
type Process struct {
	Name string
	Log  string // path of the file holding stdout and stderr

	cmd  *exec.Cmd
	done chan struct{} // closed when the process exited
	err  error         // how it exited, once done is closed
}

// StartProcess starts cmd with its output in logPath, in a process group of its own that the
// kernel kills when the test binary dies without running cleanups (go test -timeout panics,
// SIGKILL). Stopping it is the caller's business (Stop).
func StartProcess(t testing.TB, name, logPath string, cmd *exec.Cmd) *Process {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p
}

// Exited reports whether the process ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop ends the process group the way the kubelet ends a container: SIGTERM, then SIGKILL
// after grace (at once with grace 0). Stopping a stopped process is a no-op.
func (p *Process) Stop(grace time.Duration) {
	if exited, _ := p.Exited(); exited {
		return
	}
	if grace > 0 {
		signalGroup(p.cmd.Process, sigTerm)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
	}
	signalGroup(p.cmd.Process, os.Kill)
	<-p.done
}

// Tail is the last n bytes of the log (or why it cannot be read).
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
