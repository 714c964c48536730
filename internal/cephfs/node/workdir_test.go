package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/monoceph/monoceph/internal/nodestate"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
)

// TestUnstageRemovesOnlyItsOwnWorkDir: a staging record sits next to the staging path, outside
// the state directory, and may have been written by anything. Unstaging removes the work
// directory the node derives from the volume ID, recursively; a directory the record names
// instead is neither removed nor searched for keys, nor used for the recovery key.
func TestUnstageRemovesOnlyItsOwnWorkDir(t *testing.T) {
	s, _ := newUnitServer(t, false)
	ctx := context.Background()
	victim := t.TempDir()
	for _, f := range []string{"data", "keyfile-precious", nodestate.RecoveryKeyName} {
		if err := os.WriteFile(filepath.Join(victim, f), []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const vol = "vol-workdir"
	staging := filepath.Join(t.TempDir(), "globalmount")
	own := s.workDir(vol)
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(staging, 0o750); err != nil {
		t.Fatal(err)
	}
	rec := &record{VolumeID: vol, State: stateStaged, StagingPath: staging, ClusterID: "c1", FSName: "myfs",
		RootPath: "/volumes/csi/sub/u", MountedPath: "/volumes/csi/sub/u", Mounter: mount.NameFuse, CephUser: "csi-node", WorkDir: victim}
	if err := rec.write(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"data", "keyfile-precious", nodestate.RecoveryKeyName} {
		if b, err := os.ReadFile(filepath.Join(victim, f)); err != nil || string(b) != "keep me" {
			t.Errorf("%s in the directory the record names: %q, %v", f, b, err)
		}
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Errorf("the volume's own work directory after unstage: %v", err)
	}
	if r, err := readRecord(staging); r != nil || err != nil {
		t.Errorf("record after unstage: %+v, %v", r, err)
	}
}
