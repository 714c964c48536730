package imagefs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// DaemonName is the serving process's argv[0]: what hostexec.Daemons and ps see.
const DaemonName = "monoceph-rbd-fuse"

// ExitNotFound is Start's exit status when the pool, namespace or image does not exist (the
// mount point is left as it was).
const ExitNotFound = 3

// readyFD is the serving process's end of the pipe Start reads its outcome from.
const readyFD = 3

// ServeEnv marks the serving process: Start sets it, and the subcommand then calls Serve.
const ServeEnv = "MONOCEPH_RBD_FUSE_SERVE"

// NotFoundError is a pool, namespace or image that does not exist.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// Start runs exe with args as the serving process, detached in a session of its own like
// the daemon rbd-fuse forks, and returns once it has mounted (nil), or failed (its error; a
// *NotFoundError for a missing pool, namespace or image), or wait has passed (the process is
// then killed).
func Start(ctx context.Context, exe string, args []string, wait time.Duration) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		return err
	}
	defer null.Close()
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        append([]string{DaemonName}, args...),
		Env:         append(os.Environ(), ServeEnv+"=1"),
		Stdin:       null,
		Stdout:      null,
		Stderr:      null,
		ExtraFiles:  []*os.File{w}, // fd 3
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	// reap it if it ends while we wait; a daemon that outlives us is reparented
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		answer <- strings.TrimSpace(line)
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case line := <-answer:
		switch {
		case line == "ok":
			return nil
		case strings.HasPrefix(line, "notfound "):
			return &NotFoundError{Msg: strings.TrimPrefix(line, "notfound ")}
		case line != "":
			return errors.New(strings.TrimPrefix(line, "error "))
		}
		return fmt.Errorf("%s ended before mounting: %v", DaemonName, <-exited)
	case <-timer.C:
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	return fmt.Errorf("%s did not mount within %v", DaemonName, wait)
}

// Serve is the serving process: it opens the image, mounts it at dir, tells Start, and serves
// until the mount goes away or SIGTERM/SIGINT unmounts it. It returns the exit status.
func Serve(cfg Config, dir string) int {
	ready := os.NewFile(readyFD, "ready")
	tell := func(s string) {
		if ready != nil {
			fmt.Fprintln(ready, s)
			ready.Close()
			ready = nil
		}
	}
	s, err := Open(cfg)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || isNotFound(err) {
			tell("notfound " + err.Error())
			return ExitNotFound
		}
		tell("error " + err.Error())
		return 1
	}
	defer s.Close()
	srv, err := s.Mount(dir)
	if err != nil {
		tell("error mount " + dir + ": " + err.Error())
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = srv.Unmount()
	}()
	tell("ok")
	srv.Wait()
	return 0
}

// isNotFound reports a librados/librbd ENOENT (go-ceph's errors carry the code).
func isNotFound(err error) bool {
	var coder interface{ ErrorCode() int }
	return errors.As(err, &coder) && coder.ErrorCode() == -int(syscall.ENOENT)
}
