package cephfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// fill writes 1 MiB files into dir until a write fails, up to limit bytes, and returns how
// much it wrote and the error that stopped it.
func fill(t *testing.T, dir, prefix string, limit int) (int, error) {
	chunk := make([]byte, mib)
	written := 0
	for i := 0; written < limit; i++ {
		f, err := os.Create(filepath.Join(dir, prefix+string(rune('a'+i%26))+string(rune('a'+i/26))))
		if err != nil {
			return written, err
		}
		_, werr := f.Write(chunk)
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			return written, err
		}
		written += mib
	}
	return written, nil
}

// TestQuotaEnforcedAfterExpand: the quota stops writes at the volume's size, and after
// ControllerExpandVolume the same mount takes more.
func TestQuotaEnforcedAfterExpand(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	root := mountRoot(t)
	v := e.create(t, e.createReq("quota", 8*mib, rwx, nil))
	dir := filepath.Join(root, v.GetVolumeContext()["rootPath"])

	n, err := fill(t, dir, "a", 32*mib)
	if !errors.Is(err, syscall.EDQUOT) || n > 16*mib {
		t.Fatalf("an 8 MiB volume took %d bytes and stopped with %v, want EDQUOT near 8 MiB", n, err)
	}
	if _, err := e.client.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 64 * mib}, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	more, err := fill(t, dir, "b", 24*mib)
	if err != nil {
		t.Fatalf("after expanding to 64 MiB, writing %d more bytes failed after %d: %v", 24*mib, more, err)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
