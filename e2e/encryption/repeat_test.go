package encryption

import (
	"bytes"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"google.golang.org/grpc/codes"
)

// TestEncryptionRepeatMismatch: a repeated CreateVolume that asks for another encryption than
// the volume was made with is ALREADY_EXISTS and changes nothing; above all, a plain volume
// holding data is never formatted (a LUKS header over it would lose the data).
func TestEncryptionRepeatMismatch(t *testing.T) {
	r := newRig(t)
	const size = 64 << 20
	plain := r.mustCreate("repeat-plain", size, r.params(), nil)
	data := pattern(t)
	img, err := rbd.OpenImage(r.io, imageOf(plain), rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := img.WriteAt(data, 0); err != nil {
		img.Close()
		t.Fatal(err)
	}
	img.Close()

	_, err = r.create("repeat-plain", size, r.params("encrypted", "true"), nil)
	wantCode(t, err, codes.AlreadyExists, "encrypt")
	_, err = r.create("repeat-plain", size, r.params("encrypted", "true", "encryptionKMSID", "meta"), nil)
	wantCode(t, err, codes.AlreadyExists, "encrypt")
	img, err = rbd.OpenImageReadOnly(r.io, imageOf(plain), rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	_, err = img.ReadAt(got, 0)
	img.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the plain volume's data changed after an encrypted repeat (first bytes %q)", got[:16])
	}

	r.mustCreate("repeat-enc", size, r.params("encrypted", "true"), nil)
	_, err = r.create("repeat-enc", size, r.params(), nil)
	wantCode(t, err, codes.AlreadyExists, "encrypt")
	_, err = r.create("repeat-enc", size, r.params("encrypted", "true", "encryptionKMSID", "meta"), nil)
	wantCode(t, err, codes.AlreadyExists, "KMS")
	if _, err := r.create("repeat-enc", size, r.params("encrypted", "true"), nil); err != nil {
		t.Fatalf("the same request again: %v", err)
	}
}

// TestEncryptedSmallVolume: a volume no larger than the LUKS2 header (16 MiB) is made too, at
// the size asked for: the image is the volume plus the header.
func TestEncryptedSmallVolume(t *testing.T) {
	r := newRig(t)
	const size = 8 << 20
	v := r.mustCreate("small", size, r.params("encrypted", "true"), nil)
	if v.GetCapacityBytes() != size {
		t.Fatalf("capacity %d, want %d", v.GetCapacityBytes(), size)
	}
	if raw := r.rawSize(v); raw <= size {
		t.Fatalf("raw image %d bytes: no room for the header of an %d-byte volume", raw, size)
	}
	img, err := rbd.OpenImageReadOnly(r.io, imageOf(v), rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if err := img.EncryptionLoad(rbd.EncryptionOptionsLUKS2{Passphrase: []byte(passphrase)}); err != nil {
		t.Fatal(err)
	}
	if n, err := img.GetSize(); err != nil || n != size {
		t.Fatalf("size through the encryption %d, %v: want %d", n, err, size)
	}
}
