package mount

import (
	"context"
	"strings"
	"sync"

	"github.com/monoceph/monoceph/internal/hostexec"
)

// fakeExec records commands and answers them from a script keyed by command name.
type fakeExec struct {
	mu    sync.Mutex
	calls [][]string
	// run answers a command; nil means success with no output
	run func(name string, args []string) ([]byte, error)
}

func (f *fakeExec) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	f.calls = append(f.calls, append([]string{name}, args...))
	run := f.run
	f.mu.Unlock()
	if run == nil {
		return nil, nil
	}
	return run(name, args)
}

func (f *fakeExec) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, strings.Join(c, " "))
	}
	return out
}

// failure is a CommandError as the host executor returns it.
func failure(name string, args []string, output string) error {
	return &hostexec.CommandError{Name: name, Args: args, ExitCode: 1, Output: output, Err: errExit1}
}

type exitErr struct{}

func (exitErr) Error() string { return "exit status 1" }

var errExit1 = exitErr{}
