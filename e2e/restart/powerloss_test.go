package restart

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
)

// TestPowerLossKeepsFsyncedRecords: a pod writes numbered records to a file on ext4 over an RBD
// volume (fuse mounter) and fsyncs each; every process that serves the volume (the mount
// holder and the node plugin, or the plugin alone without a holder) is SIGKILLed at once,
// which loses whatever they held in memory (librbd's cache, requests in flight) as a power cut
// would. The image, read back through librbd and its filesystem journal replayed, holds every
// record whose fsync returned: an fsync in the pod is a flush to the OSDs (ext4's journal
// commit → a flush of the loop device → FUSE_FSYNC → rbd_flush).
func TestPowerLossKeepsFsyncedRecords(t *testing.T) {
	r := newRig(t)
	v1, _ := binaries(t)
	var served []*container
	if r.holder {
		served = append(served, r.startHolder("rbd", v1))
	}
	n := r.startNode("rbd", v1)
	served = append(served, n.c)
	v := r.createVolume("rbd", 64<<20)
	r.mustStagePublish(n, v)
	start := time.Now()
	w := r.startWriter("powerloss", v, "private")
	w.waitOK(t, 30, time.Minute)

	for _, c := range served {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
	for _, c := range served {
		<-c.done
	}
	w.stop()
	acked := w.written()
	t.Logf("serving processes killed after %d fsynced records (%s)", acked, w.summary(start))

	got := recordsInImage(t, v.context[volumecontext.ImageName])
	for i := range acked {
		if len(got) < (i+1)*recordSize || !bytes.Equal(got[i*recordSize:(i+1)*recordSize], record(i)) {
			t.Fatalf("record %d of %d acknowledged by fsync is not in the image: the flush did not reach the OSDs", i, acked)
		}
	}
	t.Logf("all %d records acknowledged by fsync are in the image", acked)

	// a new holder and plugin find the connection gone and unstage what is left
	if r.holder {
		h := r.startHolder("rbd", v1)
		defer h.stop(t, time.Minute)
	}
	n = r.startNode("rbd", v1)
	if err := r.unpublish(n, v); err != nil {
		t.Fatal(err)
	}
	if err := r.unstageAsCO(n, v); err != nil {
		t.Fatal(err)
	}
	n.c.kill()
	r.assertNothingLeft(v)
}

// recordsInImage reads image through librbd (rbd export), replays its ext4 journal on the
// copy (e2fsck) and returns the writer's file. Every command is bounded.
func recordsInImage(t *testing.T, image string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	img, out := filepath.Join(dir, "image"), filepath.Join(dir, "records")
	if b, err := exec.CommandContext(ctx, "rbd", "export", "--no-progress", benchPool()+"/"+image, img).CombinedOutput(); err != nil {
		t.Fatalf("rbd export: %v: %s", err, b)
	}
	// exit status 1: errors corrected (the journal replayed), which is what a crash leaves
	b, err := exec.CommandContext(ctx, "e2fsck", "-fy", img).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() > 1) {
		t.Fatalf("e2fsck of the image: %v: %s", err, b)
	}
	if b, err = exec.CommandContext(ctx, "debugfs", "-R", "dump /records "+out, img).CombinedOutput(); err != nil {
		t.Fatalf("debugfs: %v: %s", err, b)
	}
	data, err := os.ReadFile(out)
	if errors.Is(err, fs.ErrNotExist) {
		// debugfs found no such file: not even its creation reached the OSDs
		t.Logf("the image's filesystem has no records file (debugfs: %s)", bytes.TrimSpace(b))
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return data
}
