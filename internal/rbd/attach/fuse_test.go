package attach

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/cephname"
)

// TestFuseImageFileStaysInMountPoint: an image name from a volume context or a staging record
// that is not a strict Ceph name is refused by every operation before any command runs or any
// file is looked at; the file's own name comes from the work directory.
func TestFuseImageFileStaysInMountPoint(t *testing.T) {
	cred, _ := testCred(t)
	for _, name := range []string{"../../../dev/sda", "..", ".", "a/b", "-oX", "img,ro", ""} {
		t.Run(name, func(t *testing.T) {
			x := &fakeExec{t: t}
			f := NewFuse(x, nil)
			f.sys = t.TempDir()
			work := t.TempDir()
			img := Image{Pool: "rbd", Name: name}
			a := Attachment{Image: img, WorkDir: work, FuseDir: filepath.Join(work, fuseDirName), Device: "/dev/loop0"}
			ctx := context.Background()
			_, attachErr := f.Attach(ctx, Request{Image: img, MonHost: "127.0.0.1:6789", Cred: cred, WorkDir: work})
			_, refreshErr := f.Refresh(ctx, a, 0)
			var u *Unhealthy
			checkErr := f.Check(ctx, a)
			for op, err := range map[string]error{"Attach": attachErr, "Detach": f.Detach(ctx, a), "Refresh": refreshErr, "Check": checkErr} {
				if err == nil || !strings.Contains(err.Error(), "is not a plain Ceph name") {
					t.Errorf("%s = %v, want a refusal of the image name", op, err)
				}
			}
			if !errors.As(checkErr, &u) || u.Reason != "Unknown" {
				t.Errorf("Check = %v, want Unknown health", checkErr)
			}
			if len(x.calls) != 0 {
				t.Errorf("ran %q", x.calls)
			}
		})
	}
	if f, err := ImageFile(Attachment{Image: Image{Name: "csi-vol-abcdefghijklmnop"}, WorkDir: "/run/w/0123abcd"}); err != nil || f != "/run/w/0123abcd/fuse/vol-0123abcd" {
		t.Fatalf("a plain image name: %q, %v", f, err)
	}
}

// TestFuseFileNamePerNode: two nodes on one kernel (the end-to-end test's) stage a volume in
// work directories of the same name under state directories of their own; their image files
// must not share a name, or one node's Detach finds (and detaches) the other's loop device.
func TestFuseFileNamePerNode(t *testing.T) {
	a, b := filepath.Join(t.TempDir(), "0123456789abcdef"), filepath.Join(t.TempDir(), "0123456789abcdef")
	na, nb := FuseFileName(a), FuseFileName(b)
	if na == nb {
		t.Fatalf("both nodes name the image file %q", na)
	}
	if again := FuseFileName(a); again != na {
		t.Fatalf("FuseFileName(%s) = %q, then %q", a, na, again)
	}
	for _, n := range []string{na, nb} {
		if !strings.HasPrefix(n, "vol-0123456789abcdef-") || cephname.Check(n) != nil {
			t.Errorf("image file name %q", n)
		}
	}
}
