package cephcsitest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNSDropsOtherTestsMounts: the namespace lives as long as its test, so a copy of another
// test's mount taken when it was made would keep that test's loop device open until then (the
// host's / is private, so the other test's unmount does not reach the copy): internal/rbd/node's
// unstage failed with "loop devices ... are still open" while a ceph-csi test ran beside it.
func TestNSDropsOtherTestsMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces and mounts need root")
	}
	other := t.TempDir() // another test's volume, mounted when the namespace is made
	if err := unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(other, unix.MNT_DETACH) })
	n := NewNSFor(t, "[]")
	if got := n.Mounts(other); len(got) != 0 {
		t.Fatalf("the namespace holds copies of another test's mounts: %v", got)
	}
}
