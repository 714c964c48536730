package attach

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/hostexec"
	"golang.org/x/sys/unix"
)

// TestLoopDevices sets up a real loop device (root only): it is found by its backing file's
// name, recognised as reading that device and inode, and that very file, and as stale once the file is
// replaced, the way a loop device on a dead FUSE mount still names a path that now holds
// another file.
func TestLoopDevices(t *testing.T) {
	if os.Geteuid() != 0 || !exists("/dev/loop-control") {
		t.Skip("needs root and loop devices")
	}
	ctx := context.Background()
	x := hostexec.New(30 * time.Second)
	file := filepath.Join(t.TempDir(), fmt.Sprintf("backing-%d", time.Now().UnixNano()))
	if err := os.WriteFile(file, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	dev, err := loopSetup(ctx, x, file, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loopDetach(context.Background(), x, SysRoot, dev) })

	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	if devs, err := loopsNamed(SysRoot, filepath.Base(file)); err != nil || len(devs) != 1 || devs[0] != dev {
		t.Fatalf("loopsNamed = %v, %v; want [%s]", devs, err, dev)
	}
	if reads, err := loopReadsInode(ctx, dev, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino); !reads || err != nil {
		t.Fatalf("loopReadsInode = %v, %v", reads, err)
	}
	if reads, err := loopReadsInode(ctx, dev, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino+1); reads || err != nil {
		t.Fatalf("loopReadsInode of another inode = %v, %v", reads, err)
	}
	if err := loopReads(ctx, dev, file); err != nil {
		t.Fatalf("loopReads: %v", err)
	}
	if n, err := DeviceSize(dev); err != nil || n != 4<<20 {
		t.Fatalf("DeviceSize = %d, %v", n, err)
	}
	if loopReadOnly(SysRoot, dev) {
		t.Fatal("read-write loop reported read-only")
	}

	// the layer's name is handed over before the device is bound: a caller records it there
	var claimed []string
	layer, err := LoopSetupReadOnly(ctx, x, dev, func(loop string) error {
		if b := loopBacking(SysRoot, loop); b != "" {
			t.Errorf("claimed %s is already bound to %s", loop, b)
		}
		claimed = append(claimed, loop)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// more than one claim when another process took the free device first (tests and helpers
	// set up loop devices side by side): the layer is the last one claimed
	if len(claimed) == 0 || claimed[len(claimed)-1] != layer {
		t.Fatalf("claimed %v, got layer %s", claimed, layer)
	}
	if over, ok := ReadOnlyLoopOver(SysRoot, layer); !ok || over != dev {
		t.Fatalf("ReadOnlyLoopOver(%s) = %q, %v; want %s", layer, over, ok, dev)
	}
	if _, ok := ReadOnlyLoopOver(SysRoot, dev); ok {
		t.Fatal("a loop device on a file is not a read-only layer")
	}
	if err := LoopDetach(ctx, x, layer); err != nil {
		t.Fatal(err)
	}

	// another process binds the device picked first: another one is picked
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	claimed = nil
	layer, err = LoopSetupReadOnly(ctx, x, dev, func(loop string) error {
		claimed = append(claimed, loop)
		if len(claimed) == 1 {
			if _, err := x.Run(ctx, "losetup", loop, other); err != nil {
				t.Fatalf("taking %s first: %v", loop, err)
			}
			t.Cleanup(func() { _ = loopDetach(context.Background(), x, SysRoot, loop) })
		}
		return nil
	})
	if err != nil {
		t.Fatalf("LoopSetupReadOnly after losing a race: %v", err)
	}
	if len(claimed) != 2 || claimed[1] != layer || layer == claimed[0] || loopBacking(SysRoot, claimed[0]) != other {
		t.Fatalf("claimed %v, got layer %s", claimed, layer)
	}
	if over, ok := ReadOnlyLoopOver(SysRoot, layer); !ok || over != dev {
		t.Fatalf("ReadOnlyLoopOver(%s) = %q, %v; want %s", layer, over, ok, dev)
	}
	if err := LoopDetach(ctx, x, layer); err != nil {
		t.Fatal(err)
	}

	// replace the file under the same name
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := loopReads(ctx, dev, file); err == nil {
		t.Fatal("a loop device on the removed file still counts as reading the new one")
	}
	for range 2 { // idempotent
		if err := loopDetach(ctx, x, SysRoot, dev); err != nil {
			t.Fatal(err)
		}
	}
	// by name: tests of other packages may already have taken the freed device
	if loopBacking(SysRoot, dev) == file {
		t.Fatalf("%s still attached", dev)
	}
}
