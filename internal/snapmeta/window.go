package snapmeta

import (
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/kms"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// window is where a volume lies in its RBD image. A plain volume is its whole image; an
// encrypted one (librbd's LUKS2) starts after the LUKS header, which is the image's first
// kms.ImageState.HeaderBytes, and the volume is what follows. Changed block tracking answers in
// the volume's coordinates: offset 0 is the first byte a pod reads, the header is no data a
// backup application can use, and the capacity is what CreateSnapshot answered.
type window struct {
	header int64 // bytes of the image before the volume's first byte
	size   int64 // the volume's size
}

// volumeWindow reads the window of the image img, rawSize bytes at its snapshot. The
// encryption state is the image's metadata, not the snapshot's; the header's size is fixed
// when the image is formatted (a clone reads its parent's header and inherits its metadata),
// so today's value is the snapshot's.
func volumeWindow(img *snapImage, rawSize uint64) (window, error) {
	return windowOf(img.name, img.metadata, rawSize)
}

// windowOf is volumeWindow of the image named image whose metadata get reads.
func windowOf(image string, get func(key string) (string, bool, error), rawSize uint64) (window, error) {
	v, ok, err := get(kms.StateKey)
	if err != nil {
		return window{}, err
	}
	if !ok {
		if err := refuseCephCSIImage(image, get); err != nil {
			return window{}, err
		}
		return window{size: int64(rawSize)}, nil
	}
	st, err := kms.ParseImageState(v)
	if err != nil {
		return window{}, status.Errorf(codes.Internal, "image %s: %v", image, err)
	}
	// monoceph writes the header's measured size, a whole number of 4 KiB blocks (LUKS2
	// aligns its data segment so); anything else would shift every offset silently
	if st.HeaderBytes == 0 || st.HeaderBytes%4096 != 0 {
		return window{}, status.Errorf(codes.Internal, "image %s: metadata %s has headerBytes %d, not a positive multiple of 4096", image, kms.StateKey, st.HeaderBytes)
	}
	if st.HeaderBytes >= rawSize {
		return window{}, status.Errorf(codes.Internal, "encrypted image %s of %d bytes at the snapshot is no larger than its LUKS header (%d bytes)", image, rawSize, st.HeaderBytes)
	}
	return window{header: int64(st.HeaderBytes), size: int64(rawSize - st.HeaderBytes)}, nil
}

// refuseCephCSIImage is the answer for an image whose metadata get reads says ceph-csi
// encrypted it with dm-crypt (an image taken over from ceph-csi): it starts with a LUKS header
// too, of a size monoceph does not record, and its offsets would be served as the volume's.
func refuseCephCSIImage(image string, get func(key string) (string, bool, error)) error {
	enc, err := cephcsi.ImageBlockEncrypted(get)
	if err != nil || !enc {
		return err
	}
	return status.Errorf(codes.FailedPrecondition, "image %s is encrypted by ceph-csi (dm-crypt): the size of ceph-csi's LUKS header is not known to monoceph, and the offsets of its changed blocks would include it", image)
}

// raw is the image offset of the volume's offset off.
func (w window) raw(off int64) int64 { return off + w.header }

// toVolume translates the image's extent off+length into the volume's coordinates: the part in
// the header is dropped, the rest shifted down by the header and clipped to the volume's end.
// ok is false when nothing of it is the volume's.
func (w window) toVolume(off, length int64) (vOff, vLength int64, ok bool) {
	start, end := off-w.header, off+length-w.header
	if start < 0 {
		start = 0
	}
	if end > w.size {
		end = w.size
	}
	if end <= start {
		return 0, 0, false
	}
	return start, end - start, true
}
