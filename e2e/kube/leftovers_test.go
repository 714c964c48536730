package kube

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// cephObjects lists what either driver makes in the part of the cluster the e2e tests use (the
// pool's default namespace, the subvolume group csi): images, trash entries and subvolumes.
func (e *env) cephObjects() (map[string]bool, error) {
	objs := map[string]bool{}
	ls, err := e.cephCmd("rbd", "ls", e.ceph.RBDPool)
	if err != nil {
		return nil, err
	}
	for _, img := range strings.Fields(ls) {
		objs["image "+img] = true
	}
	var trash []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	out, err := e.cephCmd("rbd", "trash", "ls", "--all", "--format", "json", e.ceph.RBDPool)
	if err == nil {
		err = json.Unmarshal([]byte(out), &trash)
	}
	if err != nil {
		return nil, fmt.Errorf("rbd trash ls: %v", err)
	}
	for _, tr := range trash {
		objs["trash "+tr.Name+" ("+tr.ID+")"] = true
	}
	var subs []struct {
		Name string `json:"name"`
	}
	out, err = e.cephCmd("ceph", "fs", "subvolume", "ls", e.ceph.FSName, "csi", "--format", "json")
	if err == nil {
		err = json.Unmarshal([]byte(out), &subs)
	}
	if err != nil && !strings.Contains(err.Error(), "ENOENT") && !strings.Contains(err.Error(), "(2)") {
		return nil, fmt.Errorf("fs subvolume ls: %v", err)
	}
	for _, sv := range subs {
		objs["subvolume "+sv.Name] = true
	}
	return objs, nil
}

// checkLeftovers is registered as a test starts, before any of its processes, so that it runs
// after they stopped: what the test made and left in Ceph fails that test, by name, and is then
// purged. Without it a failed test's leftovers failed the next test's check that nothing of
// either driver is left (TestCephCSITakeoverEndToEnd on an image of TestHelmChartEndToEnd).
func (e *env) checkLeftovers() {
	t := e.t
	before, err := e.cephObjects()
	if err != nil {
		t.Fatalf("listing Ceph objects before the test: %v", err)
	}
	t.Cleanup(func() {
		var left []string
		// Ceph's own purges (ceph-csi's trash tasks, retained snapshots) take some seconds
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(2 * time.Second) {
			now, err := e.cephObjects()
			if err != nil {
				t.Errorf("listing Ceph objects after the test: %v", err)
				return
			}
			left = left[:0]
			for o := range now {
				if !before[o] {
					left = append(left, o)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			slices.Sort(left)
			t.Errorf("%s left in Ceph (purged now, so that the next test starts clean): %s", t.Name(), strings.Join(left, ", "))
			e.purgeCephCSIObjects()
		}
	})
}
