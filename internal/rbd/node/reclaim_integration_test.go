package node

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	rspb "github.com/csi-addons/spec/lib/go/reclaimspace"
	"github.com/monoceph/monoceph/internal/rbd/attach"
)

// du is the image's used bytes as `rbd du` reports them (allocated objects, from the object
// map): the oracle of what the pool holds for it.
func (r *rig) du(img attach.Image) int64 {
	r.t.Helper()
	out, err := exec.Command("rbd", "du", "--format", "json", img.Spec()).Output()
	if err != nil {
		r.t.Fatalf("rbd du %s: %v", img.Spec(), err)
	}
	var du struct {
		Images []struct {
			Used int64 `json:"used_size"`
		} `json:"images"`
	}
	if err := json.Unmarshal(out, &du); err != nil {
		r.t.Fatalf("rbd du %s: %v: %s", img.Spec(), err, out)
	}
	if len(du.Images) != 1 {
		r.t.Fatalf("rbd du names %d images: %s", len(du.Images), out)
	}
	return du.Images[0].Used
}

// run runs a command of the test (not of the server), failing the test when it fails.
func (r *rig) run(name string, args ...string) {
	r.t.Helper()
	if out, err := exec.CommandContext(r.ctx, name, args...).CombinedOutput(); err != nil {
		r.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// TestNodeReclaimSpaceFuse: the RADOS objects of a deleted file come back to the pool when
// NodeReclaimSpace trims the filesystem of a volume staged with the fuse mounter: fstrim's
// discards go from ext4 through the loop device to the image's FUSE server as hole punches,
// and from there to rbd_discard. Deleting the file alone gives nothing back.
func TestNodeReclaimSpaceFuse(t *testing.T) {
	const written = 256 * mib
	r := newRig(t)
	img := r.image("", 512*mib)
	vol := "vol-" + img.Name
	base := r.workspace(vol, "target")
	staging, target := filepath.Join(base, "staging"), filepath.Join(base, "target")
	vc := mountCap("ext4", rwo)
	if err := r.stage(vol, staging, img, vc); err != nil {
		t.Fatal(err)
	}
	if err := r.publish(vol, staging, target, vc, false); err != nil {
		t.Fatal(err)
	}
	empty := r.du(img)
	file := filepath.Join(target, "data")
	r.run("dd", "if=/dev/urandom", "of="+file, "bs=1M", "count=256", "conv=fsync", "status=none")
	full := r.du(img)
	r.run("rm", file)
	r.run("sync", "--file-system", target)
	deleted := r.du(img)
	if _, err := r.s.ReclaimSpace().NodeReclaimSpace(r.ctx, &rspb.NodeReclaimSpaceRequest{
		VolumeId: vol, VolumePath: target, StagingTargetPath: staging, VolumeCapability: nil,
	}); err != nil {
		t.Fatal(err)
	}
	reclaimed := r.du(img)
	t.Logf("rbd du used bytes: empty filesystem %d MiB, after writing %d MiB %d MiB, after deleting it %d MiB, after NodeReclaimSpace %d MiB",
		empty/mib, written/mib, full/mib, deleted/mib, reclaimed/mib)
	if full-empty < written {
		t.Fatalf("writing %d MiB took only %d MiB of the image: the test measures nothing", written/mib, (full-empty)/mib)
	}
	if deleted < full-written/10 {
		t.Errorf("deleting the file alone gave back %d MiB: the test would not show the trim working", (full-deleted)/mib)
	}
	// all of it back but what the filesystem keeps (a partly used object at each end of the
	// file's extents): within 10 % of the empty filesystem's
	if reclaimed > empty+written/10 {
		t.Errorf("after NodeReclaimSpace the image uses %d MiB, want at most %d MiB (the empty filesystem's %d MiB plus 10%% of the file)",
			reclaimed/mib, (empty+written/10)/mib, empty/mib)
	}
	r.assertNoKeyOnDisk()
}

// TestNodeReclaimSpaceBlock: for a raw block volume NodeReclaimSpace succeeds without touching
// it (a discard of the whole device would destroy its data), while the application's own
// discards of ranges reach the image through the fuse mounter.
func TestNodeReclaimSpaceBlock(t *testing.T) {
	r := newRig(t)
	img := r.image("", 128*mib)
	vol := "vol-" + img.Name
	base := r.workspace(vol, "target")
	staging, target := filepath.Join(base, "staging"), filepath.Join(base, "target")
	vc := blockCap(rwo)
	if err := r.stage(vol, staging, img, vc); err != nil {
		t.Fatal(err)
	}
	if err := r.publish(vol, staging, target, vc, false); err != nil {
		t.Fatal(err)
	}
	r.run("dd", "if=/dev/urandom", "of="+target, "bs=1M", "count=64", "oflag=direct", "status=none")
	written := r.du(img)
	if _, err := r.s.ReclaimSpace().NodeReclaimSpace(r.ctx, &rspb.NodeReclaimSpaceRequest{
		VolumeId: vol, VolumePath: target, StagingTargetPath: staging, VolumeCapability: vc,
	}); err != nil {
		t.Fatal(err)
	}
	if after := r.du(img); after != written {
		t.Errorf("NodeReclaimSpace of a block volume changed its usage from %d to %d bytes", written, after)
	}
	// the application discards the first 32 MiB itself
	r.run("blkdiscard", "--offset", "0", "--length", "33554432", target)
	discarded := r.du(img)
	t.Logf("rbd du used bytes of a block volume: after writing 64 MiB %d MiB, after blkdiscard of 32 MiB %d MiB", written/mib, discarded/mib)
	if written-discarded < 32*mib {
		t.Errorf("blkdiscard of 32 MiB gave back %d MiB", (written-discarded)/mib)
	}
}
