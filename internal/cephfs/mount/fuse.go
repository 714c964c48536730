package mount

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
)

// Files ceph-fuse keeps in a mount's work directory.
const (
	// fuseConfName is an empty configuration file ceph-fuse reads instead of
	// /etc/ceph/ceph.conf, so nothing on the host changes where or how it connects. Its base name
	// must be ceph.conf: Ceph takes the cluster name from it.
	fuseConfName = "ceph.conf"
	// FuseSocketName is the daemon's admin socket. Each daemon needs its own: a second
	// ceph-fuse on a shared socket (or pid file) fails with "(33) Numerical argument out of
	// domain". The socket path also identifies the daemon in /proc.
	FuseSocketName = "ceph-fuse.asok"
	// FuseLogName is the daemon's log.
	FuseLogName = "ceph-fuse.log"
)

// MaxSocketPath is the longest unix socket path the kernel takes (sun_path less its NUL).
const MaxSocketPath = 107

// Fuse mounts with ceph-fuse: one daemon per mount, started by the helper, which returns once
// the mount is up and leaves the daemon running in the background.
type Fuse struct {
	x hostexec.Executor
	// connectTimeout bounds the daemon's connection to the cluster (client_mount_timeout):
	// shorter than the command timeout, so Ceph's own error wins over the command being killed,
	// and a daemon whose helper was killed gives up by itself.
	connectTimeout time.Duration
	// stopGrace is how long Release waits for the daemon to exit on its own after the unmount:
	// it closes its MDS session first, which took 1-5 s on a busy test cluster. A daemon
	// killed instead leaves its capabilities blocked at the MDS until the session times out.
	stopGrace time.Duration
	// proc is where daemons are looked up (/proc).
	proc string
}

// NewFuse returns the ceph-fuse mounter.
func NewFuse(x hostexec.Executor, connectTimeout time.Duration) *Fuse {
	return &Fuse{x: x, connectTimeout: max(connectTimeout, time.Second), stopGrace: 10 * time.Second, proc: "/proc"}
}

// Name implements Mounter.
func (*Fuse) Name() string { return NameFuse }

// Available implements Mounter.
func (*Fuse) Available(context.Context) error {
	if _, err := exec.LookPath("ceph-fuse"); err != nil {
		return &UnavailableError{Mounter: NameFuse, Reason: "ceph-fuse is not installed"}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return &UnavailableError{Mounter: NameFuse, Reason: fmt.Sprintf("no FUSE device: %v", err)}
	}
	return nil
}

// ParseOptions implements Mounter.
func (*Fuse) ParseOptions(volumeOptions string, mountFlags []string) ([]string, error) {
	return ParseFuseOptions(append([]string{volumeOptions}, mountFlags...)...)
}

// FuseSocket is the admin socket of the daemon of the mount that owns workDir.
func FuseSocket(workDir string) string { return filepath.Join(workDir, FuseSocketName) }

// Args is the ceph-fuse command line for r, reading the key from keyFile.
func (f *Fuse) Args(r Request, keyFile string) []string {
	args := []string{
		r.Target,
		"-c", filepath.Join(r.WorkDir, fuseConfName),
		"-m", strings.Join(r.Monitors, ","),
		"--id", r.Cred.ID,
		"--keyfile", keyFile,
		"--client_fs", r.FSName,
		"-r", r.Path,
		"--admin_socket=" + FuseSocket(r.WorkDir),
		// an empty pid file setting writes none: a shared default would clash between daemons
		"--pid_file=",
		"--log_file=" + filepath.Join(r.WorkDir, FuseLogName),
		"--client_mount_timeout=" + strconv.Itoa(int(f.connectTimeout.Round(time.Second)/time.Second)),
	}
	var fuseOpts []string
	for _, o := range r.Options {
		if strings.HasPrefix(o, "--") {
			args = append(args, o)
		} else {
			fuseOpts = append(fuseOpts, o)
		}
	}
	if r.Node != "" {
		// after the volume's own settings, which may not set client_metadata (reserved)
		args = append(args, "--client_metadata="+NodeMetadataKey+"="+r.Node)
	}
	if r.ReadOnly {
		fuseOpts = append(fuseOpts, "ro") // last, so no option before it can undo it
	}
	if len(fuseOpts) > 0 {
		args = append(args, "-o", strings.Join(fuseOpts, ","))
	}
	return args
}

// Mount implements Mounter.
func (f *Fuse) Mount(ctx context.Context, r Request) error {
	if n := len(FuseSocket(r.WorkDir)); n > MaxSocketPath {
		return fmt.Errorf("admin socket path %s is %d bytes, more than a unix socket takes (%d)", FuseSocket(r.WorkDir), n, MaxSocketPath)
	}
	if err := os.WriteFile(filepath.Join(r.WorkDir, fuseConfName), nil, 0o600); err != nil {
		return err
	}
	// a daemon still holding this socket serves a mount that is no longer in the table (it was
	// detached lazily): it would answer for the new daemon's socket, and Release would not know
	// which one to wait for
	if err := f.stop(ctx, r.WorkDir, 0); err != nil {
		return err
	}
	_ = os.Remove(FuseSocket(r.WorkDir))
	keyFile, remove, err := writeKeyFile(r.WorkDir, r.Cred)
	if err != nil {
		return fmt.Errorf("writing the key file: %w", err)
	}
	_, err = f.x.Run(ctx, "ceph-fuse", f.Args(r, keyFile)...)
	remove()
	if err == nil {
		return nil
	}
	err = classify("ceph-fuse mount of "+r.FSName+":"+r.Path, hostexec.Redact(err, r.Cred.Key()))
	// the helper may have been killed (timeout) after forking the daemon, which may still
	// mount: make sure neither outlives the failure
	cleanup := context.WithoutCancel(ctx)
	if uerr := hostmount.LazyUnmount(cleanup, f.x, r.Target); uerr != nil {
		err = fmt.Errorf("%w (and unmounting %s: %v)", err, r.Target, uerr)
	}
	if serr := f.stop(cleanup, r.WorkDir, 0); serr != nil {
		err = fmt.Errorf("%w (and stopping its daemon: %v)", err, serr)
	}
	return err
}

// Release implements Mounter: a ceph-fuse daemon exits by itself once its mount is gone;
// Release waits for that, stops a daemon that does not, and removes its admin socket. The log
// stays: after a crash it says why the daemon died.
func (f *Fuse) Release(ctx context.Context, workDir string) error {
	if err := f.stop(ctx, workDir, f.stopGrace); err != nil {
		return err
	}
	if err := os.Remove(FuseSocket(workDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Running implements Mounter.
func (f *Fuse) Running(_ context.Context, workDir string) (bool, error) {
	pids, err := FuseDaemons(f.proc, FuseSocket(workDir))
	return len(pids) > 0, err
}

// stop waits up to grace for the daemons of workDir to exit, then sends SIGTERM and, two
// seconds later, SIGKILL.
func (f *Fuse) stop(ctx context.Context, workDir string, grace time.Duration) error {
	return hostexec.StopDaemons(ctx, f.proc, "ceph-fuse", "--admin_socket="+FuseSocket(workDir), grace)
}

// FuseDaemons returns the ceph-fuse processes started with admin socket asok (see
// hostexec.Daemons).
func FuseDaemons(proc, asok string) ([]int, error) {
	return hostexec.Daemons(proc, "ceph-fuse", "--admin_socket="+asok)
}
