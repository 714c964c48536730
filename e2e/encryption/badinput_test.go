package encryption

import (
	"strings"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/cephtest"
	"google.golang.org/grpc/codes"
)

// TestEncryptedBadInput: requests that cannot make a usable encrypted volume are
// INVALID_ARGUMENT saying why, and leave nothing (the rig checks the namespace is empty).
func TestEncryptedBadInput(t *testing.T) {
	r := newRig(t)
	plain := r.mustCreate("plain-source", size, r.params("mounter", "fuse"), nil)
	fromPlain := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: plain.GetVolumeId()}}}
	for _, tt := range []struct {
		name    string
		params  map[string]string
		secrets map[string]string
		src     *csi.VolumeContentSource
		texts   []string
	}{
		{"krbd", r.params("encrypted", "true", "mounter", "krbd"), nil, nil, []string{`parameters["mounter"]`, "only the fuse mounter"}},
		{"rbd-nbd", r.params("encrypted", "true", "mounter", "rbd-nbd"), nil, nil, []string{`parameters["mounter"]`, "rbd-nbd would map the ciphertext"}},
		{"fallback mounters", r.params("encrypted", "true", "tryOtherMounters", "true"), nil, nil, []string{`parameters["tryOtherMounters"]`}},
		{"unknown KMS", r.params("encrypted", "true", "encryptionKMSID", "nope"), nil, nil, []string{`parameters["encryptionKMSID"]`, `unknown KMS ID "nope"`, "meta, vault"}},
		{"unsupported KMS", r.params("encrypted", "true", "encryptionKMSID", "vault"), nil, nil, []string{`"vaulttenantsa" is not supported yet`}},
		{"no passphrase", r.params("encrypted", "true"), r.d.Cluster.Secrets(), nil, []string{"encryptionPassphrase"}},
		{"no passphrase, metadata", r.params("encrypted", "true", "encryptionKMSID", "meta"), r.d.Cluster.Secrets(), nil, []string{"encryptionPassphrase"}},
		{"file encryption", r.params("encrypted", "true", "encryptionType", "file"), nil, nil, []string{"fscrypt"}},
		{"plain source", r.params("encrypted", "true"), nil, fromPlain, []string{"is not encrypted", "does not encrypt existing data"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			secrets := tt.secrets
			if secrets == nil {
				secrets = r.secrets(passphrase)
			}
			_, err := r.ctrl.CreateVolume(r.ctx, &csi.CreateVolumeRequest{Name: "bad-" + strings.ReplaceAll(tt.name, " ", "-"), CapacityRange: &csi.CapacityRange{RequiredBytes: size},
				VolumeCapabilities: []*csi.VolumeCapability{mountCap}, Parameters: tt.params, Secrets: secrets, VolumeContentSource: tt.src})
			wantCode(t, err, codes.InvalidArgument, tt.texts...)
			// nothing reserved: only the plain source's image and its reservation are here
			imgs, err := rbd.GetImageNames(r.io)
			if err != nil || len(imgs) != 1 {
				t.Fatalf("images after a refused create: %v, %v", imgs, err)
			}
			keys, err := r.io.GetAllOmapValues(journalObject(t, r), "", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			for k := range keys {
				if strings.Contains(k, "bad-") {
					t.Fatalf("a refused create left journal key %q", k)
				}
			}
		})
	}
}

// journalObject is the one journal object of the test's namespace (monoceph.journal.<shard>).
func journalObject(t *testing.T, r *rig) string {
	t.Helper()
	objs, err := cephtest.ObjectsWithPrefix(r.io, "monoceph.journal.")
	if err != nil || len(objs) != 1 {
		t.Fatalf("journal objects: %v, %v", objs, err)
	}
	return objs[0]
}
