package hostexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Executor runs one external command to completion and returns its combined output.
type Executor interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// CommandError is a command that failed: it did not start, exited non-zero or timed out.
type CommandError struct {
	Name     string
	Args     []string // never holds a secret: keys travel in files only
	ExitCode int      // -1 when the command did not exit on its own
	Output   string
	Err      error
}

// maxOutput bounds how much of a failed command's output an error message carries.
const maxOutput = 1024

func (e *CommandError) Error() string {
	out := strings.TrimSpace(e.Output)
	if len(out) > maxOutput {
		out = "..." + out[len(out)-maxOutput:]
	}
	msg := fmt.Sprintf("%s %s: %v", e.Name, strings.Join(e.Args, " "), e.Err)
	if out != "" {
		msg += ": " + out
	}
	return msg
}

func (e *CommandError) Unwrap() error { return e.Err }

// ExitCode returns the exit status of a CommandError in err's chain, or -1.
func ExitCode(err error) int {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce.ExitCode
	}
	return -1
}

// Redact removes secret from the output of a CommandError in err's chain. Some helpers print a
// key they fail to decode (ceph-fuse: "auth: failed to decode key '...'"), and the output ends
// up in RPC errors and logs.
func Redact(err error, secret string) error {
	var ce *CommandError
	if secret == "" || !errors.As(err, &ce) {
		return err
	}
	ce.Output = strings.ReplaceAll(ce.Output, secret, "<redacted>")
	return err
}

// waitDelay bounds how long Run waits for the output pipes after the command exited, in case a
// daemon the command forked (ceph-fuse, rbd-fuse, rbd-nbd) keeps them open a little longer.
const waitDelay = 2 * time.Second

// DefaultTimeout bounds each command of an Executor made with no timeout.
const DefaultTimeout = time.Minute

// New runs commands on the host, each bounded by timeout (DefaultTimeout when not positive)
// and by ctx.
func New(timeout time.Duration) Executor {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return hostExecutor{timeout: timeout}
}

type hostExecutor struct{ timeout time.Duration }

func (x hostExecutor) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = commandEnv()
	cmd.WaitDelay = waitDelay
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := start(cmd)
	if err == nil {
		err = cmd.Wait()
		ours.remove(cmd.Process.Pid)
	}
	if err == nil {
		return out.Bytes(), nil
	}
	ce := &CommandError{Name: name, Args: args, ExitCode: -1, Output: out.String(), Err: err}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		// report the deadline, not "signal: killed", so callers map it to DEADLINE_EXCEEDED
		ce.Err = fmt.Errorf("%w (after %s)", ctx.Err(), x.timeout)
	case errors.As(err, &ee):
		ce.ExitCode = ee.ExitCode()
	}
	return out.Bytes(), ce
}

// commandEnv is the plugin's environment without Ceph's own variables: CEPH_ARGS or CEPH_CONF
// would silently change what ceph-fuse, rbd-fuse and rbd connect to and as whom (a test shell
// exports the admin keyring in CEPH_ARGS). LC_ALL=C keeps messages in the English the callers
// match on.
func commandEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CEPH_") || strings.HasPrefix(kv, "LC_ALL=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}
