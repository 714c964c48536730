package mount

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/hostexec"
)

// Kernel mounts with the kernel CephFS client (mount -t ceph, through mount.ceph).
type Kernel struct {
	x hostexec.Executor
	// filesystems lists the filesystems the kernel knows (/proc/filesystems).
	filesystems string

	mu sync.Mutex
	// a failed modprobe is remembered for retryAfter, so a node without the module does not
	// run modprobe on every stage of a volume that lets the node choose its mounter
	unavailable error
	checked     time.Time
}

const retryAfter = time.Minute

// NewKernel returns the kernel mounter.
func NewKernel(x hostexec.Executor) *Kernel {
	return &Kernel{x: x, filesystems: "/proc/filesystems"}
}

// NewKernelWith is NewKernel reading the filesystem list from another file (tests).
func NewKernelWith(x hostexec.Executor, filesystems string) *Kernel {
	return &Kernel{x: x, filesystems: filesystems}
}

// Name implements Mounter.
func (*Kernel) Name() string { return NameKernel }

// Available implements Mounter: the kernel lists ceph among its filesystems, or loading the
// module makes it do so.
func (k *Kernel) Available(ctx context.Context) error {
	if ok, err := k.listed(); err != nil || ok {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.unavailable != nil && time.Since(k.checked) < retryAfter {
		return k.unavailable
	}
	k.checked = time.Now()
	if _, err := k.x.Run(ctx, "modprobe", "ceph"); err != nil {
		k.unavailable = &UnavailableError{Mounter: NameKernel, Reason: fmt.Sprintf("the kernel has no ceph filesystem and loading it failed: %v", err)}
		return k.unavailable
	}
	if ok, err := k.listed(); err != nil || ok {
		k.unavailable = nil
		return err
	}
	k.unavailable = &UnavailableError{Mounter: NameKernel, Reason: "modprobe ceph succeeded but the kernel lists no ceph filesystem"}
	return k.unavailable
}

func (k *Kernel) listed() (bool, error) {
	b, err := os.ReadFile(k.filesystems)
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// "nodev\tceph" or "\text4"
		if f := strings.Fields(sc.Text()); len(f) > 0 && f[len(f)-1] == "ceph" {
			return true, nil
		}
	}
	return false, sc.Err()
}

// ParseOptions implements Mounter.
func (*Kernel) ParseOptions(volumeOptions string, mountFlags []string) ([]string, error) {
	return ParseKernelOptions(append([]string{volumeOptions}, mountFlags...)...)
}

// Args is the mount command line for r, reading the key from secretFile.
func (k *Kernel) Args(r Request, secretFile string) ([]string, error) {
	mons, err := KernelMonitors(r.Monitors)
	if err != nil {
		return nil, err
	}
	opts := append([]string{"name=" + r.Cred.ID, "secretfile=" + secretFile, "mds_namespace=" + r.FSName}, r.Options...)
	if r.ReadOnly {
		opts = append(opts, "ro") // last, so no option before it can undo it
	}
	return []string{"-t", "ceph", mons + ":" + r.Path, r.Target, "-o", strings.Join(opts, ",")}, nil
}

// KernelMonitors is the monitor list of a kernel CephFS mount source: host:port entries
// joined by commas. Of an address vector it takes the v1 entries: the legacy protocol is the
// one every kernel client speaks without extra options (ms_mode).
func KernelMonitors(monitors []string) (string, error) {
	var out []string
	for _, m := range monitors {
		m = strings.TrimSpace(m)
		if strings.HasPrefix(m, "[v") && strings.HasSuffix(m, "]") {
			var v1s []string
			for part := range strings.SplitSeq(m[1:len(m)-1], ",") {
				if addr, ok := strings.CutPrefix(part, "v1:"); ok {
					addr, _, _ = strings.Cut(addr, "/") // drop a nonce
					v1s = append(v1s, addr)
				}
			}
			if len(v1s) == 0 {
				return "", fmt.Errorf("monitor %q has no v1 address, which the kernel client needs", m)
			}
			m = strings.Join(v1s, ",")
		}
		for one := range strings.SplitSeq(m, ",") {
			eps, err := v1.MonitorEndpoints(one)
			if err != nil {
				return "", err
			}
			out = append(out, eps...)
		}
	}
	if len(out) == 0 {
		return "", errors.New("no monitors")
	}
	return strings.Join(out, ","), nil
}

// Mount implements Mounter.
func (k *Kernel) Mount(ctx context.Context, r Request) error {
	secretFile, remove, err := writeKeyFile(r.WorkDir, r.Cred)
	if err != nil {
		return fmt.Errorf("writing the secret file: %w", err)
	}
	defer remove()
	args, err := k.Args(r, secretFile)
	if err != nil {
		return err
	}
	if _, err := k.x.Run(ctx, "mount", args...); err != nil {
		return classify("kernel mount of "+r.FSName+":"+r.Path, hostexec.Redact(err, r.Cred.Key()))
	}
	return nil
}

// Release implements Mounter: the kernel client needs nothing beyond the unmount.
func (*Kernel) Release(context.Context, string) error { return nil }

// Running implements Mounter: a kernel mount leaves no process behind.
func (*Kernel) Running(context.Context, string) (bool, error) { return false, nil }
