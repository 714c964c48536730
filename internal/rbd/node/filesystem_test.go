package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/hostmount"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedExec answers commands from a table keyed by command name (no entry: success, no
// output) and records what ran.
type scriptedExec struct {
	mu      sync.Mutex
	answers map[string]func(args []string) ([]byte, error)
	ran     []string
}

func (e *scriptedExec) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	e.mu.Lock()
	e.ran = append(e.ran, name)
	answer := e.answers[name]
	e.mu.Unlock()
	if answer == nil {
		return nil, nil
	}
	return answer(args)
}

func exitStatus(name string, code int, output string) func([]string) ([]byte, error) {
	return func(args []string) ([]byte, error) {
		return []byte(output), &hostexec.CommandError{Name: name, Args: args, ExitCode: code, Output: output, Err: fmt.Errorf("exit status %d", code)}
	}
}

// TestFsckFailureFailsTheStage: the filesystem of a formatted device is checked before it is
// mounted read-write, and a check that did not finish or failed to run fails the stage with
// nothing mounted; every filesystem command runs on the filesystem executor (bounded by
// --node-command-timeout), none on the one bounded by --ceph-op-timeout.
func TestFsckFailureFailsTheStage(t *testing.T) {
	ext4 := func([]string) ([]byte, error) { return []byte("DEVNAME=/dev/loop9\nTYPE=ext4\n"), nil }
	killed := func(args []string) ([]byte, error) {
		return nil, &hostexec.CommandError{Name: "fsck", Args: args, ExitCode: -1,
			Err: fmt.Errorf("%w (after %s)", context.DeadlineExceeded, DefaultFilesystemTimeout)}
	}
	tests := []struct {
		name     string
		readOnly bool
		blkid    func([]string) ([]byte, error)
		fsck     func([]string) ([]byte, error)
		code     codes.Code
		msg      string
		ran      []string
	}{
		{name: "clean", blkid: ext4, code: codes.OK, ran: []string{"blkid", "fsck", "mount"}},
		{name: "errors corrected", blkid: ext4, fsck: exitStatus("fsck", 1, "clean after repair"), code: codes.OK, ran: []string{"blkid", "fsck", "mount"}},
		{name: "fsck killed at its timeout", blkid: ext4, fsck: killed, code: codes.DeadlineExceeded, msg: "not mounting it unchecked", ran: []string{"blkid", "fsck"}},
		{name: "fsck could not run", blkid: ext4, fsck: exitStatus("fsck", 8, "/dev/loop9 is mounted.\ne2fsck: Cannot continue, aborting."), code: codes.Internal, msg: "Cannot continue", ran: []string{"blkid", "fsck"}},
		{name: "errors left", blkid: ext4, fsck: exitStatus("fsck", 4, "UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY."), code: codes.FailedPrecondition, msg: "could not correct", ran: []string{"blkid", "fsck"}},
		{name: "fsck missing", blkid: ext4, fsck: func([]string) ([]byte, error) {
			return nil, &hostexec.CommandError{Name: "fsck", ExitCode: -1, Err: exec.ErrNotFound}
		}, code: codes.Internal, msg: "executable file not found", ran: []string{"blkid", "fsck"}},
		{name: "read-only: no check, no repair", readOnly: true, blkid: ext4, fsck: killed, code: codes.OK, ran: []string{"blkid", "mount"}},
		{name: "blank: made, not checked", blkid: exitStatus("blkid", 2, ""), fsck: killed, code: codes.OK, ran: []string{"blkid", "blkid", "mkfs.ext4", "mount"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &scriptedExec{}
			fsx := &scriptedExec{answers: map[string]func([]string) ([]byte, error){"blkid": tt.blkid, "fsck": tt.fsck}}
			s := newTestServer(t, localMap, x)
			s.fsx = fsx
			rec := &record{VolumeID: "v", StagingPath: filepath.Join(t.TempDir(), "staging"), FsType: "ext4", ReadOnly: tt.readOnly}
			rec.Attachment.Device = "/dev/loop9"
			err := s.mountStaging(context.Background(), rec)
			st, _ := status.FromError(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.msg) {
				t.Fatalf("mountStaging = %v, want %v containing %q", err, tt.code, tt.msg)
			}
			if !slices.Equal(fsx.ran, tt.ran) {
				t.Fatalf("filesystem commands %q, want %q", fsx.ran, tt.ran)
			}
			if len(x.ran) != 0 {
				t.Fatalf("the Ceph-bounded executor ran %q", x.ran)
			}
		})
	}
}

// TestStageRefusesAFilesystemFsckCannotCheck stages a real ext4 loop device whose filesystem
// is mounted elsewhere on the node (a leftover mount): fsck -a refuses with exit status 8
// ("is mounted ... Cannot continue"), and the stage must fail instead of mounting the
// filesystem a second time, unchecked, as mount-utils does.
func TestStageRefusesAFilesystemFsckCannotCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop devices and mounts")
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v: %s", name, args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	run("mkfs.ext4", "-q", "-F", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() { _ = exec.Command("losetup", "--detach", dev).Run() })
	elsewhere, staging := filepath.Join(dir, "elsewhere"), filepath.Join(dir, "staging")
	for _, d := range []string{elsewhere, staging} {
		if err := os.Mkdir(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	run("mount", dev, elsewhere)
	t.Cleanup(func() {
		for _, p := range []string{staging, elsewhere} {
			for m, _ := hostmount.MountAt(p); m != nil; m, _ = hostmount.MountAt(p) {
				_ = exec.Command("umount", "--lazy", p).Run()
			}
		}
	})

	s := newTestServer(t, localMap, nil)
	rec := &record{VolumeID: "v", StagingPath: staging, FsType: "ext4"}
	rec.Attachment.Device = dev
	err := s.mountStaging(context.Background(), rec)
	if st, _ := status.FromError(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "fsck -a "+dev) {
		t.Fatalf("mountStaging of a filesystem mounted elsewhere = %v, want INTERNAL from fsck", err)
	}
	if m, err := hostmount.MountAt(staging); m != nil || err != nil {
		t.Fatalf("the filesystem was mounted at the staging path anyway (%+v, %v)", m, err)
	}
}
