package attach

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/hostexec"
)

// TestFuseImageFileStaysInMountPoint: an image name from a volume context or a staging record
// that is not a plain file name in rbd-fuse's mount point is refused by every operation before
// any command runs or any file outside the mount point is looked at.
func TestFuseImageFileStaysInMountPoint(t *testing.T) {
	cred, _ := testCred(t)
	for _, name := range []string{"../../../dev/sda", "..", ".", "a/b", "-oX", "img,ro", ""} {
		t.Run(name, func(t *testing.T) {
			x := &fakeExec{t: t}
			f := NewFuse(x, "")
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
				if err == nil || !strings.Contains(err.Error(), "does not name a file in the rbd-fuse mount point") {
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
	if _, err := imageFile(Attachment{Image: Image{Name: "csi-vol-abcdefghijklmnop"}, WorkDir: "/run/w"}); err != nil {
		t.Fatalf("a plain image name: %v", err)
	}
}

func TestFusePoolArgs(t *testing.T) {
	for _, c := range []struct {
		img  Image
		want []string
	}{
		// rbd-fuse's defaults are never spelt out: some releases crash on the options
		{Image{Pool: "rbd", Name: "i"}, nil},
		{Image{Pool: "fast", Name: "i"}, []string{"--poolname=fast"}},
		{Image{Pool: "rbd", Namespace: "ns", Name: "i"}, []string{"--namespace=ns"}},
		{Image{Pool: "fast", Namespace: "ns", Name: "i"}, []string{"--poolname=fast", "--namespace=ns"}},
	} {
		if got := poolArgs(c.img); !slices.Equal(got, c.want) {
			t.Errorf("poolArgs(%+v) = %q, want %q", c.img, got, c.want)
		}
	}
}

func TestCrashed(t *testing.T) {
	x := hostexec.New(10 * time.Second)
	// rbd-fuse 18.2.7 dies of SIGSEGV on --poolname, of SIGABRT on --namespace
	for script, want := range map[string]bool{"kill -SEGV $$": true, "kill -ABRT $$": true, "kill -TERM $$": false, "exit 139": false, "true": false} {
		_, err := x.Run(context.Background(), "sh", "-c", script)
		if got := crashed(err); got != want {
			t.Errorf("%s: crashed(%v) = %v, want %v", script, err, got, want)
		}
	}
}
