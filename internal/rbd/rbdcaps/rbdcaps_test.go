package rbdcaps

import "testing"

func TestLookup(t *testing.T) {
	// in every librbd monoceph supports
	if !Has("rbd_diff_iterate2") || !Has("rbd_group_snap_create") {
		t.Fatal("the loaded librbd lacks calls every release has: the lookup is broken")
	}
	if Has("rbd_no_such_call") {
		t.Fatal("found a function librbd does not have")
	}
	// what this machine's library offers, for the log of the test run
	t.Logf("librbd %s: rbd_diff_iterate3: %v, rbd_clone4: %v", libraryVersion(), Has(DiffIterate3), Has(Clone4))
}
