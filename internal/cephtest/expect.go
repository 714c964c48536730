package cephtest

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Expect records whether this cluster and these libraries have feature, a capability some
// tests use only where Ceph offers it (rbd_diff_iterate3, rbd_clone4, fs_quiesce). A test takes
// the path without it elsewhere, which is right on an older release but would hide a release
// that should have it: the release tier names in MONOCEPH_EXPECT (comma-separated) what each
// release has, and there a missing feature fails the test instead of passing on the fallback.
func Expect(t testing.TB, feature string, have bool) {
	t.Helper()
	t.Logf("%s: %v", feature, map[bool]string{true: "present, used", false: "absent, fallback used"}[have])
	if !have && slices.Contains(strings.Split(os.Getenv("MONOCEPH_EXPECT"), ","), feature) {
		t.Fatalf("MONOCEPH_EXPECT says this release has %s, but it was not found: the test would prove only the fallback", feature)
	}
}
