package attach

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
)

// Mapper attaches images with `rbd device map`: the kernel client (krbd) or rbd-nbd. Both
// keep the image open in the kernel or in their own daemon, so the key file is only needed
// while the command runs.
type Mapper struct {
	name       string
	deviceType string // rbd's --device-type
	x          hostexec.Executor
	sys        string
	dev        string // where device nodes live
	lookPath   func(string) (string, error)
	// ConnectTimeout bounds the rbd tool's connection to the cluster.
	ConnectTimeout time.Duration
}

// NewKRBD returns the kernel RBD attacher.
func NewKRBD(x hostexec.Executor) *Mapper {
	return &Mapper{name: volumecontext.MounterKRBD, deviceType: "krbd", x: x, sys: SysRoot, dev: "/dev", lookPath: exec.LookPath, ConnectTimeout: 30 * time.Second}
}

// NewNBD returns the rbd-nbd attacher.
func NewNBD(x hostexec.Executor) *Mapper {
	return &Mapper{name: volumecontext.MounterNBD, deviceType: "nbd", x: x, sys: SysRoot, dev: "/dev", lookPath: exec.LookPath, ConnectTimeout: 30 * time.Second}
}

// Name implements Attacher.
func (m *Mapper) Name() string { return m.name }

// Available implements Attacher.
func (m *Mapper) Available() error {
	need := []string{"rbd"}
	if m.deviceType == "nbd" {
		need = append(need, "rbd-nbd")
	}
	for _, cmd := range need {
		if _, err := m.lookPath(cmd); err != nil {
			return &UnavailableError{Mounter: m.name, Missing: "the " + cmd + " command is not installed"}
		}
	}
	switch m.deviceType {
	case "krbd":
		if !exists(filepath.Join(m.sys, "bus", "rbd")) {
			return &UnavailableError{Mounter: m.name, Missing: filepath.Join(m.sys, "bus", "rbd") + " is missing (the rbd kernel module is not loaded)"}
		}
	case "nbd":
		if !exists(filepath.Join(m.sys, "module", "nbd")) && !exists(filepath.Join(m.dev, "nbd0")) {
			return &UnavailableError{Mounter: m.name, Missing: filepath.Join(m.dev, "nbd0") + " is missing (the nbd kernel module is not loaded)"}
		}
	}
	return nil
}

// mapping is one entry of `rbd device list --format json`. krbd names the image "name",
// rbd-nbd "image".
type mapping struct {
	Pool      string `json:"pool"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Image     string `json:"image"`
	Snap      string `json:"snap"`
	Device    string `json:"device"`
}

// mapped finds the device the image is mapped at (not a snapshot of it), or "".
func (m *Mapper) mapped(ctx context.Context, img Image) (string, error) {
	out, err := m.x.Run(ctx, "rbd", "device", "list", "--device-type", m.deviceType, "--format", "json")
	if err != nil {
		return "", err
	}
	var list []mapping
	if err := json.Unmarshal(out, &list); err != nil {
		return "", fmt.Errorf("rbd device list: %w", err)
	}
	for _, e := range list {
		name := e.Name
		if name == "" {
			name = e.Image
		}
		if e.Pool == img.Pool && e.Namespace == img.Namespace && name == img.Name && (e.Snap == "" || e.Snap == "-") {
			return e.Device, nil
		}
	}
	return "", nil
}

// Attach implements Attacher.
func (m *Mapper) Attach(ctx context.Context, req Request) (Attachment, error) {
	a := Attachment{Image: req.Image, ReadOnly: req.ReadOnly, WorkDir: req.WorkDir}
	if err := m.Available(); err != nil {
		return a, err
	}
	dev, err := m.mapped(ctx, req.Image)
	if err != nil {
		return a, err
	}
	if dev != "" {
		a.Device = dev
		return a, nil
	}
	args, removeKey, err := credentialArgs(req.WorkDir, req.MonHost, req.Cred, m.ConnectTimeout)
	if err != nil {
		return a, err
	}
	defer removeKey()
	args = append(args, "device", "map", "--device-type", m.deviceType)
	if req.ReadOnly {
		args = append(args, "--read-only")
	}
	if m.deviceType == "krbd" {
		// do not wait for udev: inside a container there may be none, and devtmpfs creates the
		// device node anyway
		args = append(args, "--options", "noudev")
	}
	out, err := m.x.Run(ctx, "rbd", append(args, req.Image.Spec())...)
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") && strings.Contains(string(out), "image") {
			return a, fmt.Errorf("%w: %v", ErrImageNotFound, err)
		}
		return a, err
	}
	a.Device = lastLine(out)
	if !strings.HasPrefix(a.Device, "/dev/") {
		return a, fmt.Errorf("rbd device map printed %q, not a device", a.Device)
	}
	return a, nil
}

// Detach implements Attacher.
func (m *Mapper) Detach(ctx context.Context, a Attachment) error {
	// unmap what the image is mapped at now: the recorded device may have been reused by
	// another image since (after a reboot)
	dev, err := m.mapped(ctx, a.Image)
	if err != nil {
		return err
	}
	if dev != "" {
		args := []string{"device", "unmap", "--device-type", m.deviceType}
		if m.deviceType == "krbd" {
			args = append(args, "--options", "noudev")
		}
		if _, err := m.x.Run(ctx, "rbd", append(args, dev)...); err != nil {
			return err
		}
	}
	return removeCredentialFiles(a.WorkDir)
}

// Refresh implements Attacher. Both the kernel client and rbd-nbd watch the image header and
// resize the device themselves; this only waits for that.
func (m *Mapper) Refresh(ctx context.Context, a Attachment, minBytes int64) (int64, error) {
	for {
		size, err := DeviceSize(a.Device)
		if err != nil || size >= minBytes {
			return size, err
		}
		select {
		case <-ctx.Done():
			return size, fmt.Errorf("%s is %d bytes, want at least %d: %w", a.Device, size, minBytes, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Check implements Attacher.
func (m *Mapper) Check(ctx context.Context, a Attachment) error {
	block := filepath.Join(m.sys, "block", filepath.Base(a.Device))
	if _, err := os.Stat(block); err != nil {
		return unhealthy("DeviceGone", "device %s is gone: %w", a.Device, err)
	}
	if m.deviceType == "nbd" {
		// rbd-nbd's pid shows while its daemon serves the device
		if b, err := os.ReadFile(filepath.Join(block, "pid")); err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return unhealthy("DaemonGone", "the rbd-nbd daemon of %s is gone", a.Device)
		}
	}
	dev, err := m.mapped(ctx, a.Image)
	if err != nil {
		return unhealthy("Unknown", "listing mapped devices: %w", err)
	}
	if dev != a.Device {
		return unhealthy("DeviceGone", "image %s is mapped at %q, not at %s", a.Image.Spec(), dev, a.Device)
	}
	return nil
}
