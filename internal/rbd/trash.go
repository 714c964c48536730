package rbd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ceph/go-ceph/rados"
)

// The RBD trash directory of a pool namespace: one omap key "id_<image id>" per trashed image,
// its value a cls::rbd::TrashImageSpec.
const (
	trashObject    = "rbd_trash"
	trashKeyPrefix = "id_"
	// trashSourceRemoving is cls::rbd::TRASH_IMAGE_SOURCE_REMOVING. rbd_remove first moves an
	// image to the trash under this source, then deletes it; a client killed in between leaves
	// it there, and rbd_trash_list (go-ceph's GetTrashList) does not show such entries.
	trashSourceRemoving = 3
	// trashSourceUser is where Trash(0) puts an image kept only for clones of its trashed
	// snapshots.
	trashSourceUser = 0
)

// trashEntry is one entry of the trash directory.
type trashEntry struct {
	ID     string
	Name   string
	Source uint8
}

// trashEntries lists the whole trash directory of io's namespace, including the entries of
// removals in progress that rbd_trash_list hides.
func trashEntries(io *rados.IOContext) ([]trashEntry, error) {
	vals, err := io.GetAllOmapValues(trashObject, "", trashKeyPrefix, 256)
	if errors.Is(err, rados.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]trashEntry, 0, len(vals))
	for k, v := range vals {
		source, name, err := decodeTrashSpec(v)
		if err != nil {
			return nil, fmt.Errorf("trash entry %s: %w", k, err)
		}
		out = append(out, trashEntry{ID: strings.TrimPrefix(k, trashKeyPrefix), Name: name, Source: source})
	}
	return out, nil
}

// trashedAs returns the trash entries of images named name with the given source.
func trashedAs(io *rados.IOContext, name string, source uint8) ([]trashEntry, error) {
	all, err := trashEntries(io)
	if err != nil {
		return nil, err
	}
	var out []trashEntry
	for _, e := range all {
		if e.Name == name && e.Source == source {
			out = append(out, e)
		}
	}
	return out, nil
}

// decodeTrashSpec reads the source and name of an encoded cls::rbd::TrashImageSpec: the
// versioned-encoding header (struct_v, struct_compat, u32 length), then source as one byte and
// name as a u32-length-prefixed string, all little-endian. The fields after the name (times,
// state) are not needed.
func decodeTrashSpec(b []byte) (source uint8, name string, err error) {
	const header = 1 + 1 + 4
	if len(b) < header+1+4 {
		return 0, "", errors.New("trash image spec too short")
	}
	if v, compat := b[0], b[1]; v < 1 || compat > 2 {
		return 0, "", fmt.Errorf("trash image spec of unknown encoding (v%d, compat %d)", v, compat)
	}
	body := b[header:]
	if n := binary.LittleEndian.Uint32(b[2:header]); int(n) > len(body) {
		return 0, "", errors.New("trash image spec truncated")
	}
	source = body[0]
	n := binary.LittleEndian.Uint32(body[1:5])
	if int(n) > len(body)-5 {
		return 0, "", errors.New("trash image name truncated")
	}
	return source, string(body[5 : 5+n]), nil
}
