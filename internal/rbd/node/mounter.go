package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"github.com/monoceph/monoceph/internal/hostexec"
	"k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// mount-utils runs mount, mkfs, fsck, blkid, resize2fs and xfs_growfs itself, with no
// timeout. The adapters below send those commands through the server's filesystem executor
// instead, bound to the RPC's context and to Options.FilesystemTimeout.

// formatter is a SafeFormatAndMount whose commands run under ctx.
func (s *Server) formatter(ctx context.Context) *mount.SafeFormatAndMount {
	x := boundExec{ctx: ctx, x: s.fsx}
	return mount.NewSafeFormatAndMount(boundMounter{Interface: s.base, x: x}, x)
}

// resizer grows filesystems with commands that run under ctx.
func (s *Server) resizer(ctx context.Context) *mount.ResizeFs {
	return mount.NewResizeFs(boundExec{ctx: ctx, x: s.fsx})
}

// boundMounter mounts and unmounts through the executor; the mount table queries come from
// the embedded mount-utils mounter.
type boundMounter struct {
	mount.Interface
	x boundExec
}

func (m boundMounter) Mount(source, target, fstype string, options []string) error {
	return m.MountSensitiveWithoutSystemdWithMountFlags(source, target, fstype, options, nil, nil)
}

func (m boundMounter) MountSensitive(source, target, fstype string, options, sensitive []string) error {
	return m.MountSensitiveWithoutSystemdWithMountFlags(source, target, fstype, options, sensitive, nil)
}

func (m boundMounter) MountSensitiveWithoutSystemd(source, target, fstype string, options, sensitive []string) error {
	return m.MountSensitiveWithoutSystemdWithMountFlags(source, target, fstype, options, sensitive, nil)
}

// MountSensitiveWithoutSystemdWithMountFlags mounts with mount(8). This driver never passes
// sensitive options (keys travel in files), so they may appear on the command line.
func (m boundMounter) MountSensitiveWithoutSystemdWithMountFlags(source, target, fstype string, options, sensitive, flags []string) error {
	args, _ := mount.MakeMountArgsSensitiveWithMountFlags(source, target, fstype, options, sensitive, flags)
	_, err := m.x.x.Run(m.x.ctx, "mount", args...)
	return err
}

func (m boundMounter) Unmount(target string) error {
	_, err := m.x.x.Run(m.x.ctx, "umount", target)
	return err
}

// boundExec is the k8s.io/utils/exec interface over a hostexec.Executor and a context.
type boundExec struct {
	ctx context.Context
	x   hostexec.Executor
}

func (e boundExec) Command(cmd string, args ...string) utilexec.Cmd {
	return &boundCmd{ctx: e.ctx, x: e.x, name: cmd, args: args}
}

func (e boundExec) CommandContext(ctx context.Context, cmd string, args ...string) utilexec.Cmd {
	return &boundCmd{ctx: ctx, x: e.x, name: cmd, args: args}
}

func (boundExec) LookPath(file string) (string, error) { return exec.LookPath(file) }

// boundCmd runs to completion only (Run, Output, CombinedOutput), which is all mount-utils
// uses; the streaming methods report that they are unsupported.
type boundCmd struct {
	ctx  context.Context
	x    hostexec.Executor
	name string
	args []string
}

var errStreaming = errors.New("streaming command I/O is not supported")

func (c *boundCmd) CombinedOutput() ([]byte, error) {
	out, err := c.x.Run(c.ctx, c.name, c.args...)
	return out, exitError(err)
}

// Output returns the combined output too: the executor does not separate the streams.
func (c *boundCmd) Output() ([]byte, error) { return c.CombinedOutput() }
func (c *boundCmd) Run() error {
	_, err := c.CombinedOutput()
	return err
}
func (c *boundCmd) SetDir(string)                      {}
func (c *boundCmd) SetStdin(io.Reader)                 {}
func (c *boundCmd) SetStdout(io.Writer)                {}
func (c *boundCmd) SetStderr(io.Writer)                {}
func (c *boundCmd) SetEnv([]string)                    {}
func (c *boundCmd) StdoutPipe() (io.ReadCloser, error) { return nil, errStreaming }
func (c *boundCmd) StderrPipe() (io.ReadCloser, error) { return nil, errStreaming }
func (c *boundCmd) Start() error                       { return errStreaming }
func (c *boundCmd) Wait() error                        { return errStreaming }
func (c *boundCmd) Stop()                              {}

// exitError gives mount-utils the error shapes it inspects: an ExitError with the status
// (blkid's 2 means "no filesystem", fsck's 1 "errors corrected") and ErrExecutableNotFound.
// The output is left out: mount-utils adds it to its own messages.
func exitError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, exec.ErrNotFound) {
		return utilexec.ErrExecutableNotFound
	}
	var ce *hostexec.CommandError
	if errors.As(err, &ce) && ce.ExitCode >= 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("%s: %w", ce.Name, ce.Err), Code: ce.ExitCode}
	}
	return err
}
