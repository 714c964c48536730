package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scripted answers commands from a table and records them.
type scripted struct {
	mu      sync.Mutex
	answers map[string]string // command line prefix → output
	calls   []string
}

func (s *scripted) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	s.mu.Lock()
	s.calls = append(s.calls, line)
	s.mu.Unlock()
	for prefix, out := range s.answers {
		if strings.HasPrefix(line, prefix) {
			return []byte(out), nil
		}
	}
	return nil, errors.New("unexpected command: " + line)
}

const csiHandle = "0001-0002-c1-0000000000000002-c050fde3-2a93-4a45-900c-96bcc96c6b40"

// writeStash lays out what ceph-csi's node plugin leaves at a staging path.
func writeStash(t *testing.T, stagingPath string, stash string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(stagingPath, csiHandle), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stagingPath, cephcsiStashName), []byte(stash), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestUnstageCephCSIStaging: a volume ceph-csi's node plugin staged (krbd) is unstaged by
// monoceph: its device unmapped through rbd, ceph-csi's directory and stash removed; a second
// unstage finds nothing to do.
func TestUnstageCephCSIStaging(t *testing.T) {
	x := &scripted{answers: map[string]string{
		"rbd device list --device-type krbd":                             `[{"id":"3","pool":"rbd","namespace":"k8s","name":"csi-vol-c050fde3-2a93-4a45-900c-96bcc96c6b40","snap":"-","device":"/dev/rbd3"}]`,
		"rbd device unmap --device-type krbd --options noudev /dev/rbd3": "",
	}}
	s := newTestServer(t, localMap, x)
	stp := filepath.Join(t.TempDir(), "staging")
	writeStash(t, stp, `{"Version":3,"pool":"rbd","radosNamespace":"k8s","image":"csi-vol-c050fde3-2a93-4a45-900c-96bcc96c6b40","accessType":false,"encrypted":false}`)
	ctx := context.Background()

	_, err := s.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: csiHandle, StagingTargetPath: stp, VolumeCapability: mountCap("ext4", rwo),
		VolumeContext: map[string]string{"clusterID": "local", "pool": "rbd", "imageName": "csi-vol-c050fde3-2a93-4a45-900c-96bcc96c6b40"},
		Secrets:       goodSecrets})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "ceph-csi") {
		t.Fatalf("NodeStageVolume over ceph-csi's staging: %v, want FAILED_PRECONDITION naming ceph-csi", err)
	}
	for range 2 {
		if _, err := s.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: csiHandle, StagingTargetPath: stp}); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(strings.Join(x.calls, "\n"), "rbd device unmap --device-type krbd --options noudev /dev/rbd3") {
		t.Errorf("the device was not unmapped: %q", x.calls)
	}
	for _, p := range []string{filepath.Join(stp, csiHandle), filepath.Join(stp, cephcsiStashName)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
}

// TestUnstageCephCSIEncrypted: a LUKS staging of ceph-csi's is left for ceph-csi.
func TestUnstageCephCSIEncrypted(t *testing.T) {
	x := &scripted{}
	s := newTestServer(t, localMap, x)
	stp := filepath.Join(t.TempDir(), "staging")
	writeStash(t, stp, `{"Version":3,"pool":"rbd","image":"csi-vol-x","encrypted":true}`)
	_, err := s.NodeUnstageVolume(context.Background(), &csi.NodeUnstageVolumeRequest{VolumeId: csiHandle, StagingTargetPath: stp})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "encryption") {
		t.Fatalf("unstage of an encrypted ceph-csi staging: %v", err)
	}
	if len(x.calls) != 0 {
		t.Errorf("commands ran: %q", x.calls)
	}
}

// TestStageRefusesEncrypted: ceph-csi's encrypted volume context is refused before anything is
// attached: its image holds a LUKS header, not a filesystem monoceph may format.
func TestStageRefusesEncrypted(t *testing.T) {
	x := &scripted{}
	s := newTestServer(t, localMap, x)
	_, err := s.NodeStageVolume(context.Background(), &csi.NodeStageVolumeRequest{VolumeId: csiHandle, StagingTargetPath: filepath.Join(t.TempDir(), "s"),
		VolumeCapability: mountCap("ext4", rwo), Secrets: goodSecrets,
		VolumeContext: map[string]string{"clusterID": "local", "pool": "rbd", "imageName": "csi-vol-x", "encrypted": "true", "mounter": "rbd"}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "encrypt") {
		t.Fatalf("stage of an encrypted volume: %v", err)
	}
	if len(x.calls) != 0 {
		t.Errorf("commands ran: %q", x.calls)
	}
}

// TestTryOtherMounters: with ceph-csi's tryOtherMounters, a node lacking the mounter a volume
// asks for picks one it has, preferring krbd, then rbd-nbd, then fuse; without it the stage
// fails naming what is missing.
func TestTryOtherMounters(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	var want string
	for _, m := range volumecontext.Mounters {
		if s.attachers[m].Available() == nil {
			want = m
			break
		}
	}
	r := stageRequest{image: volumecontext.Image{Mounter: volumecontext.MounterNBD, TryOtherMounters: true}}
	if s.attachers[volumecontext.MounterNBD].Available() == nil {
		want = volumecontext.MounterNBD
	}
	a, err := s.pickAttacher(&r, nil)
	switch {
	case want == "" && status.Code(err) != codes.FailedPrecondition:
		t.Fatalf("no mounter available, got %v", err)
	case want != "" && (err != nil || a.Name() != want || r.image.Mounter != want):
		t.Fatalf("picked %v (%v), want %s", r.image.Mounter, err, want)
	}
	// staged with one already: keep it
	r = stageRequest{image: volumecontext.Image{Mounter: volumecontext.MounterKRBD, TryOtherMounters: true}}
	if _, err := s.pickAttacher(&r, &record{Mounter: volumecontext.MounterFuse}); r.image.Mounter != volumecontext.MounterFuse {
		t.Fatalf("restage picked %s (%v), want the recorded fuse", r.image.Mounter, err)
	}
	if s.attachers[volumecontext.MounterNBD].Available() != nil {
		r = stageRequest{image: volumecontext.Image{Mounter: volumecontext.MounterNBD}}
		if _, err := s.pickAttacher(&r, nil); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "rbd-nbd") {
			t.Fatalf("without tryOtherMounters: %v", err)
		}
	}
}
