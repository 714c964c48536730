package encryption

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// TestEncryptedGroupMember: a group snapshot member of an encrypted volume has the volume's
// size (the image's less its LUKS header), and restoring it into an unencrypted class (its pods
// would read ciphertext) or an encrypted one is INVALID_ARGUMENT.
func TestEncryptedGroupMember(t *testing.T) {
	r := newRig(t)
	const size = 32 << 20
	v := r.mustCreate("gm", size, r.params("encrypted", "true"), nil)
	group := csi.NewGroupControllerClient(r.d.Conn)
	resp, err := group.CreateVolumeGroupSnapshot(r.ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: "gs-enc",
		SourceVolumeIds: []string{v.GetVolumeId()}, Secrets: r.secrets("")})
	if err != nil {
		t.Fatalf("CreateVolumeGroupSnapshot: %v", err)
	}
	gs := resp.GetGroupSnapshot()
	var ids []string
	for _, s := range gs.GetSnapshots() {
		ids = append(ids, s.GetSnapshotId())
	}
	t.Cleanup(func() {
		if _, err := group.DeleteVolumeGroupSnapshot(context.Background(), &csi.DeleteVolumeGroupSnapshotRequest{GroupSnapshotId: gs.GetGroupSnapshotId(),
			SnapshotIds: ids, Secrets: r.secrets("")}); err != nil {
			t.Errorf("DeleteVolumeGroupSnapshot: %v", err)
		}
	})
	if len(ids) != 1 {
		t.Fatalf("%d members, want 1", len(ids))
	}
	if got := gs.GetSnapshots()[0].GetSizeBytes(); got != size {
		t.Errorf("member size %d, want the volume's %d", got, size)
	}
	src := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: ids[0]}}}
	_, err = r.create("gm-plain", size, r.params(), src)
	wantCode(t, err, codes.InvalidArgument, "encrypted")
	_, err = r.create("gm-enc", size, r.params("encrypted", "true"), src)
	wantCode(t, err, codes.InvalidArgument, "encrypted")
}
