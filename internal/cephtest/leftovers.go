package cephtest

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"
)

// librbdDirectories are the per-namespace objects librbd keeps even when no image exists, with
// the omap key prefixes that name images (or groups) in them: only such keys count as
// leftovers (rbd_directory also holds its own "state").
var librbdDirectories = map[string][]string{
	"rbd_directory": {"name_", "id_"}, "rbd_trash": {""}, "rbd_children": {""},
	"rbd_info": nil, "rbd_mirroring": nil, "rbd_namespace": nil, "rbd_group_directory": {"name_", "id_"},
}

// RBDLeftovers lists everything left in io's pool namespace besides librbd's empty directories:
// images, image stubs (rbd_id.*, rbd_header.*, data and object-map objects of removed images),
// groups (their directory entries and rbd_group_header.* objects),
// entries of librbd's directories (including trash entries of removals in progress, which
// rbd_trash_list hides) and the driver's own objects (journals, trackers). An empty result
// means nothing leaked.
func RBDLeftovers(io *rados.IOContext) ([]string, error) {
	var objs []string
	if err := io.ListObjects(func(oid string) { objs = append(objs, oid) }); err != nil {
		return nil, err
	}
	var out []string
	data := map[string]int{} // data objects per image ID, counted rather than listed
	for _, oid := range objs {
		if rest, ok := strings.CutPrefix(oid, "rbd_data."); ok {
			id, _, _ := strings.Cut(rest, ".")
			data[id]++
			continue
		}
		prefixes, ok := librbdDirectories[oid]
		if !ok {
			out = append(out, "object "+oid)
			continue
		}
		vals, err := io.GetAllOmapValues(oid, "", "", 1000)
		if errors.Is(err, rados.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("omap of %s: %w", oid, err)
		}
		for k := range vals {
			for _, p := range prefixes {
				if strings.HasPrefix(k, p) {
					out = append(out, oid+" key "+k)
					break
				}
			}
		}
	}
	for id, n := range data {
		out = append(out, fmt.Sprintf("%d objects rbd_data.%s.*", n, id))
	}
	sort.Strings(out)
	return out, nil
}

// ObjectsWithPrefix lists the objects of io's namespace whose names start with prefix.
func ObjectsWithPrefix(io *rados.IOContext, prefix string) ([]string, error) {
	var out []string
	err := io.ListObjects(func(oid string) {
		if strings.HasPrefix(oid, prefix) {
			out = append(out, oid)
		}
	})
	sort.Strings(out)
	return out, err
}

// SubvolumePurgeWait is how long Settled waits for the volumes module to purge subvolumes.
const SubvolumePurgeWait = 30 * time.Second

// Settled calls list until it returns nothing or SubvolumePurgeWait has passed, and returns
// its last answer. For lists of CephFS subvolumes: a subvolume removed with retained snapshots
// goes once its last snapshot is removed, at once on Pacific but asynchronously on Reef (it
// stays listed as snapshot-retained, without snapshots, for a few seconds). Also for RADOS
// objects of removed RBD images whose snapshot clones the OSD trims in the background. What is
// still listed after the wait is left behind.
func Settled(list func() []string) []string {
	deadline := time.Now().Add(SubvolumePurgeWait)
	for {
		left := list()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(500 * time.Millisecond)
	}
}
