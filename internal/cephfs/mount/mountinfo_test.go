package mount

import (
	"context"
	"testing"
	"time"

	"k8s.io/mount-utils"
)

func TestIsCephFS(t *testing.T) {
	for fsType, want := range map[string]bool{
		"fuse.ceph-fuse": true, // ceph-fuse, or a bind mount of it
		"ceph":           true, // the kernel client
		"ext4":           false,
		"fuse.rbd-fuse":  false,
	} {
		if got := IsCephFS(&mount.MountInfo{FsType: fsType}); got != want {
			t.Errorf("IsCephFS(%s) = %v, want %v", fsType, got, want)
		}
	}
	if IsCephFS(nil) {
		t.Error("IsCephFS(nil)")
	}
}

func TestInspectUnmounted(t *testing.T) {
	state, m, err := Inspect(context.Background(), t.TempDir(), time.Second)
	if err != nil || state != NotMounted || m != nil {
		t.Fatalf("Inspect = %v, %v, %v; want not mounted", state, m, err)
	}
}
