package node

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/childtest"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/oplock"
)

// publishCrash is the NodePublishVolume a child process runs until it dies at a fault point.
type publishCrash struct {
	StateDir, ClusterMap, VolumeID, Staging, Target string
}

const publishCrashEnv = "MONOCEPH_RBD_NODE_CRASH"

// TestPublishCrashChild is the child side of TestReadOnlyLayerOfACrashedPublish: a node plugin
// on the parent's state directory publishes a block volume read-only and dies at the fault
// point. It does nothing in a normal run.
func TestPublishCrashChild(t *testing.T) {
	raw := os.Getenv(publishCrashEnv)
	if raw == "" {
		t.Skip("child process of TestReadOnlyLayerOfACrashedPublish only")
	}
	var c publishCrash
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		t.Fatal(err)
	}
	clusters, err := clustermap.Load(c.ClusterMap)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{NodeID: "node-1", StateDir: c.StateDir, Clusters: clusters, Locks: oplock.New()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{
		VolumeId: c.VolumeID, StagingTargetPath: c.Staging, TargetPath: c.Target, VolumeCapability: blockCap(rwo), Readonly: true,
	})
	t.Fatalf("child survived its fault point (err %v)", err)
}

// layersOver lists the loop devices whose backing file is the block device dev.
func layersOver(dev string) []string {
	var out []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) == dev {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// TestReadOnlyLayerOfACrashedPublish: a read-only publish of a read-write staged block volume
// puts a read-only loop device over the staged one and bind-mounts that at the target. A
// plugin killed between the two leaves a loop device nothing is mounted from; the CO then
// either retries the publish, which must use that device rather than make a second one, or
// unpublishes, which must detach it although nothing is mounted at the target.
func TestReadOnlyLayerOfACrashedPublish(t *testing.T) {
	if os.Getenv(publishCrashEnv) != "" {
		t.Skip("in the child")
	}
	r := newRig(t)
	img := r.image("", 16*mib)
	vol := "vol-" + img.Name
	base := r.workspace(vol, "ro")
	staging, target := filepath.Join(base, "staging"), filepath.Join(base, "ro")
	vc := blockCap(rwo)
	if err := r.stage(vol, staging, img, vc); err != nil {
		t.Fatal(err)
	}
	rec, err := readRecord(staging)
	if err != nil || rec == nil {
		t.Fatalf("staging record: %v, %v", rec, err)
	}
	dev := rec.Attachment.Device
	t.Cleanup(func() {
		for _, l := range layersOver(dev) {
			t.Logf("cleanup: detaching leftover layer %s", l)
			_ = exec.Command("losetup", "--detach", l).Run()
		}
	})

	crash := func(t *testing.T) {
		t.Helper()
		b, _ := json.Marshal(publishCrash{StateDir: r.s.opts.StateDir, ClusterMap: filepath.Join(filepath.Dir(r.s.opts.StateDir), "clusters.json"),
			VolumeID: vol, Staging: staging, Target: target})
		childtest.RunToFaultPoint(t, "TestPublishCrashChild", "rbd.NodePublishVolume.read-only-layer", publishCrashEnv+"="+string(b))
		got := layersOver(dev)
		if len(got) != 1 {
			t.Fatalf("after the crash: read-only layers %v, want the one the child made", got)
		}
		t.Logf("the child died with read-only layer %s over %s and nothing mounted", got[0], dev)
		if m, _ := hostmount.MountAt(target); m != nil {
			t.Fatalf("the child mounted %s before its fault point", target)
		}
	}

	t.Run("unpublish", func(t *testing.T) {
		crash(t)
		if err := r.unpublish(vol, target); err != nil {
			t.Fatal(err)
		}
		if got := layersOver(dev); len(got) != 0 {
			t.Fatalf("after NodeUnpublishVolume: read-only layers %v left over %s", got, dev)
		}
	})
	t.Run("publish again", func(t *testing.T) {
		crash(t)
		left := layersOver(dev)
		if err := r.publish(vol, staging, target, vc, true); err != nil {
			t.Fatal(err)
		}
		if got := layersOver(dev); len(got) != 1 || got[0] != left[0] {
			t.Fatalf("after the retried publish: read-only layers %v, want only %s, the crashed publish's", got, left[0])
		}
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write(make([]byte, 512))
			f.Close()
		}
		if !errors.Is(err, syscall.EROFS) && !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES) {
			t.Fatalf("writing the read-only block target: %v, want it refused", err)
		}
		if err := r.unpublish(vol, target); err != nil {
			t.Fatal(err)
		}
		if got := layersOver(dev); len(got) != 0 {
			t.Fatalf("after NodeUnpublishVolume: read-only layers %v left over %s", got, dev)
		}
	})
	if err := r.unstage(vol, staging); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(base); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}
