package cephcsi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
)

// ceph-csi's reference trackers (version 1), one per CephFS snapshot that backs shallow
// volumes, next to the journal:
//
//	object  rt-backingsnapshot-<snapshot handle>
//	xattr   csi.ceph.com/rt-version = uint32 big-endian 1
//	data    uint32 big-endian: the number of Normal references
//	omap    <reference> → one byte, its type: 1 Normal, 2 Mask
//
// The snapshot's own reference is its handle; a shallow volume's is its subvolume name
// (csi-vol-<uuid>, although no such subvolume exists). Deleting the CSI snapshot masks its
// reference instead of removing it, so that a retried Add cannot bring it back; the tracker
// object is removed when the count reaches zero, and whoever removed it removes the Ceph
// snapshot. Every change here is one version-guarded write (radosop.Update), as ceph-csi's own.

// RefType is the type of a reference.
type RefType byte

// Reference types.
const (
	RefNormal RefType = 1
	RefMask   RefType = 2
)

const (
	trackerPrefix  = "rt-backingsnapshot-"
	trackerXattr   = "csi.ceph.com/rt-version"
	trackerVersion = 1
	// maxRefs bounds one read: far more shallow volumes than one snapshot serves.
	maxRefs = 100000
)

// TrackerName is the tracker object of a CephFS snapshot handle.
func TrackerName(snapshotHandle string) string { return trackerPrefix + snapshotHandle }

// Tracker is a reference tracker as read.
type Tracker struct {
	Exists bool
	// Count is the number of Normal references, as the object records it.
	Count uint32
	Refs  map[string]RefType
}

func (t Tracker) clone() Tracker {
	out := Tracker{Exists: t.Exists, Count: t.Count, Refs: make(map[string]RefType, len(t.Refs))}
	for k, v := range t.Refs {
		out.Refs[k] = v
	}
	return out
}

func u32(n uint32) []byte {
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, n)
	return b
}

// readTracker reads count, references and version in one operation, then checks the layout
// version (set once, at creation).
func readTracker(io *rados.IOContext, oid string) (Tracker, uint64, error) {
	op := rados.CreateReadOp()
	defer op.Release()
	data := make([]byte, 4)
	rd := op.Read(0, data)
	refs := op.GetOmapValues("", "", maxRefs+1)
	if err := op.Operate(io, oid, rados.OperationNoFlag); err != nil {
		if errors.Is(err, rados.ErrNotFound) {
			return Tracker{}, 0, nil
		}
		return Tracker{}, 0, err
	}
	ver, err := io.GetLastVersion()
	if err != nil {
		return Tracker{}, 0, err
	}
	corrupt := func(why string) (Tracker, uint64, error) {
		return Tracker{}, 0, ceph.NewError("ceph-csi reference tracker "+oid, ceph.ErrInconsistent, why)
	}
	if rd.BytesRead != 4 {
		return corrupt(fmt.Sprintf("%d bytes of reference count, want 4", rd.BytesRead))
	}
	t := Tracker{Exists: true, Count: binary.BigEndian.Uint32(data), Refs: map[string]RefType{}}
	for {
		kv, err := refs.Next()
		if err != nil {
			return Tracker{}, 0, err
		}
		if kv == nil {
			break
		}
		if len(kv.Value) != 1 || (RefType(kv.Value[0]) != RefNormal && RefType(kv.Value[0]) != RefMask) {
			return corrupt(fmt.Sprintf("reference %q has type %x", kv.Key, kv.Value))
		}
		t.Refs[kv.Key] = RefType(kv.Value[0])
	}
	if refs.More() {
		return corrupt("too many references")
	}
	v := make([]byte, 8)
	n, err := io.GetXattr(oid, trackerXattr, v)
	if errors.Is(err, rados.ErrNotFound) {
		// removed since the read: the version check of the write fails, and the step runs again
		return t, ver, nil
	}
	if err != nil {
		return Tracker{}, 0, err
	}
	if n != 4 || binary.BigEndian.Uint32(v[:4]) != trackerVersion {
		return corrupt(fmt.Sprintf("layout version %x, want %d", v[:n], trackerVersion))
	}
	return t, ver, nil
}

// ReadTracker reads a tracker; a missing one has Exists false.
func ReadTracker(ctx context.Context, loc Location, oid string) (Tracker, error) {
	return radosop.With(ctx, loc, "read ceph-csi reference tracker", func(io *rados.IOContext) (Tracker, error) {
		t, _, err := readTracker(io, oid)
		return t, err
	})
}

// updateTracker is the read-decide-write loop of every tracker change.
func updateTracker(ctx context.Context, loc Location, op, oid string, decide func(Tracker) (*radosop.Change, Tracker, error)) (Tracker, error) {
	return radosop.Update(ctx, loc, op, oid, func(io *rados.IOContext) (*radosop.Change, uint64, Tracker, error) {
		t, ver, err := readTracker(io, oid)
		if err != nil {
			return nil, 0, t, err
		}
		c, after, err := decide(t)
		return c, ver, after, err
	})
}

// TrackerAdd adds refs as Normal references; references already there, masked or not, stay as
// they are. A missing tracker is created holding refs.
func TrackerAdd(ctx context.Context, loc Location, oid string, refs ...string) (Tracker, error) {
	return updateTracker(ctx, loc, "add to ceph-csi reference tracker", oid, func(t Tracker) (*radosop.Change, Tracker, error) {
		after := t.clone()
		set := map[string][]byte{}
		for _, r := range refs {
			if _, ok := t.Refs[r]; !ok {
				set[r] = []byte{byte(RefNormal)}
				after.Refs[r] = RefNormal
			}
		}
		if !t.Exists {
			after.Exists, after.Count = true, uint32(len(set))
			return &radosop.Change{Set: set, Data: u32(after.Count), Xattrs: map[string][]byte{trackerXattr: u32(trackerVersion)}}, after, nil
		}
		if len(set) == 0 {
			return nil, t, nil
		}
		after.Count = t.Count + uint32(len(set))
		return &radosop.Change{Set: set, Data: u32(after.Count)}, after, nil
	})
}

// TrackerRemove removes references: a Normal one is deleted, a Mask one turns an existing
// Normal reference into a masked one (or records the mask), and neither is counted any more.
// When no Normal reference is left the object is removed: the result then has Exists false,
// and the caller removes the snapshot. A missing tracker counts as removed.
func TrackerRemove(ctx context.Context, loc Location, oid string, refs map[string]RefType) (Tracker, error) {
	return updateTracker(ctx, loc, "remove from ceph-csi reference tracker", oid, func(t Tracker) (*radosop.Change, Tracker, error) {
		if !t.Exists {
			return nil, t, nil
		}
		after := t.clone()
		var rm []string
		set := map[string][]byte{}
		var drop uint32
		for r, typ := range refs {
			cur, found := t.Refs[r]
			switch {
			case found && typ == RefNormal:
				rm = append(rm, r)
				delete(after.Refs, r)
				if cur == RefNormal {
					drop++
				}
			case found && typ == RefMask && cur == RefNormal:
				set[r] = []byte{byte(RefMask)}
				after.Refs[r] = RefMask
				drop++
			case !found && typ == RefMask:
				set[r] = []byte{byte(RefMask)}
				after.Refs[r] = RefMask
			}
		}
		if len(rm) == 0 && len(set) == 0 {
			return nil, t, nil
		}
		if drop > t.Count {
			return nil, t, ceph.NewError("ceph-csi reference tracker "+oid, ceph.ErrInconsistent, "reference count would go below zero")
		}
		after.Count = t.Count - drop
		if after.Count == 0 {
			return &radosop.Change{Delete: true}, Tracker{}, nil
		}
		return &radosop.Change{Rm: rm, Set: set, Data: u32(after.Count)}, after, nil
	})
}
