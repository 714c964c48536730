package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
)

// TestUnstageRemovesOnlyItsOwnWorkDir: a staging record sits next to the staging path, outside
// the state directory, and may have been written by anything. Detaching removes key files,
// Ceph's configuration file and directories in the work directory the node derives from the
// volume ID, never in one the record names.
func TestUnstageRemovesOnlyItsOwnWorkDir(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	victim := t.TempDir()
	files := []string{"ceph.conf", "keyfile-precious"}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(victim, f), []byte("keep me"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(victim, "rbd-fuse"), 0o700); err != nil {
		t.Fatal(err)
	}
	const vol = "vol-workdir"
	staging := filepath.Join(t.TempDir(), "globalmount")
	req := stageRequest{volumeID: vol, stagingPath: staging, access: access{fsType: "ext4"},
		image: volumecontext.Image{ClusterID: "local", Pool: "rbd", Name: "img", Mounter: volumecontext.MounterFuse}}
	rec := newRecord(req, victim)
	rec.Attachment.FuseDir = filepath.Join(victim, "rbd-fuse")
	rec.State = stateStaged
	if err := rec.write(); err != nil {
		t.Fatal(err)
	}
	own := s.workDir(vol)
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "ceph.conf"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: staging}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if b, err := os.ReadFile(filepath.Join(victim, f)); err != nil || string(b) != "keep me" {
			t.Errorf("%s in the directory the record names: %q, %v", f, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "rbd-fuse")); err != nil {
		t.Errorf("rbd-fuse directory the record names: %v", err)
	}
	if _, err := os.Stat(own); !os.IsNotExist(err) {
		t.Errorf("the volume's own work directory after unstage: %v", err)
	}
}
