package snapmeta

import (
	"testing"

	"github.com/monoceph/monoceph/internal/kms"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEncryptedRefused: an image with monoceph's encryption state is refused: its offsets
// would be the raw image's, the LUKS2 header included, not the volume's.
func TestEncryptedRefused(t *testing.T) {
	e := newEnv(t, Options{})
	im := e.newImage(t, 8<<20)
	im.write(t, 0, 4096, 'x')
	if err := im.img.SetMetadata(kms.StateKey, `{"format":"luks2","headerBytes":16777216}`); err != nil {
		t.Fatal(err)
	}
	s1 := im.snap(t)
	s2 := im.snap(t)
	for name, run := range map[string]func() (stream, error){
		"allocated": func() (stream, error) { return e.allocated(t, s1, 0, 0) },
		"delta":     func() (stream, error) { return e.delta(t, s1, s2, 0, 0) },
	} {
		_, err := run()
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s of an encrypted image: %v, want FailedPrecondition", name, err)
		}
	}
}
