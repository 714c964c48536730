// Package inventory joins Ceph's objects with Kubernetes' to say what each is: in use, bound,
// released, orphaned, dangling, a journal entry without its object, an object without its
// journal entry, or trash.
package inventory

import (
	"cmp"
	"slices"
	"time"

	"github.com/monoceph/monoceph/internal/owner"
)

// State is what an object (or a PV) is, seen from both sides.
type State string

// States, from the most to the least alive.
const (
	InUse       State = "in-use"       // a VolumeAttachment names its PV
	Bound       State = "bound"        // a PV (or VolumeSnapshotContent) names it
	Released    State = "released"     // its PV is Released: the claim is gone, the PV kept (Retain)
	Orphaned    State = "orphaned"     // in the journal and in Ceph, no PV names it
	Dangling    State = "dangling"     // a PV names a volume whose object is gone
	JournalOnly State = "journal-only" // a journal entry whose object is missing (or not finished)
	Unjournaled State = "unjournaled"  // named like ours, but no journal entry (a crash between the two)
	Trashed     State = "trashed"      // in the RBD trash (held by snapshots or clones, or moved by hand)
)

// Kind is what sort of object an entry is.
type Kind string

// Kinds.
const (
	Volume   Kind = "volume"
	Snapshot Kind = "snapshot"
)

// Object is one object found on the Ceph side, with what the journal says of it.
type Object struct {
	Cluster   string // clusterID of the cluster map
	Pool      string // RBD pool, or the CephFS filesystem
	Namespace string // RADOS namespace (RBD) or subvolume group (CephFS)
	Kind      Kind
	Name      string // image, subvolume, or image@snapshot
	// Handle is the CSI volume or snapshot ID that names it ("" if unjournaled)
	Handle string
	// RequestName is the CSI name the journal reserved for it (the PV or snapshot content name)
	RequestName string
	Format      string // "monoceph" or "ceph-csi": whose journal
	Journaled   bool   // the journal has an entry
	Exists      bool   // the object exists in Ceph (outside the trash)
	Trashed     bool   // it is in the RBD trash
	Created     time.Time
	Owner       owner.Keys
}

// PV is the part of a PersistentVolume (or a VolumeSnapshotContent) the join reads.
type PV struct {
	Name         string
	Handle       string // spec.csi.volumeHandle, or status.snapshotHandle
	Phase        string // Bound, Released, Available, Failed
	ClaimRef     string // namespace/name of its PVC or VolumeSnapshot
	Snapshot     bool   // a VolumeSnapshotContent
	Attached     bool   // a VolumeAttachment names it
	AttachedNode string
}

// Entry is one line of the inventory.
type Entry struct {
	State     State      `json:"state"`
	Cluster   string     `json:"cluster,omitempty"`
	Pool      string     `json:"pool,omitempty"`
	Namespace string     `json:"namespace,omitempty"`
	Kind      Kind       `json:"kind"`
	Object    string     `json:"object,omitempty"`
	Handle    string     `json:"handle,omitempty"`
	Format    string     `json:"format,omitempty"`
	PV        string     `json:"pv,omitempty"` // PV or VolumeSnapshotContent
	Claim     string     `json:"claim,omitempty"`
	Node      string     `json:"node,omitempty"`
	Created   time.Time  `json:"created,omitzero"`
	Owner     owner.Keys `json:"owner,omitempty"`
}

// Join classifies every object and every PV of ours. covers says whether a PV's handle points
// at a place that was listed (a cluster and pool the scan reached): a PV elsewhere is not called
// dangling because its pool was not looked at. nil covers every handle.
func Join(objs []Object, pvs []PV, covers func(handle string) bool) []Entry {
	byHandle := make(map[string]*PV, len(pvs))
	for i := range pvs {
		byHandle[pvs[i].Handle] = &pvs[i]
	}
	seen := make(map[string]bool, len(objs))
	out := make([]Entry, 0, len(objs))
	for _, o := range objs {
		e := Entry{Cluster: o.Cluster, Pool: o.Pool, Namespace: o.Namespace, Kind: o.Kind, Object: o.Name, Handle: o.Handle,
			Format: o.Format, Created: o.Created, Owner: o.Owner}
		pv := byHandle[o.Handle]
		if o.Handle != "" && pv != nil {
			seen[o.Handle] = true
			e.PV, e.Claim, e.Node = pv.Name, pv.ClaimRef, pv.AttachedNode
		}
		e.State = classify(o, pv)
		out = append(out, e)
	}
	for _, pv := range pvs {
		if seen[pv.Handle] || (covers != nil && !covers(pv.Handle)) {
			continue
		}
		kind := Volume
		if pv.Snapshot {
			kind = Snapshot
		}
		out = append(out, Entry{State: Dangling, Kind: kind, Handle: pv.Handle, PV: pv.Name, Claim: pv.ClaimRef, Node: pv.AttachedNode})
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object), cmp.Compare(a.PV, b.PV))
	})
	return out
}

func classify(o Object, pv *PV) State {
	switch {
	case o.Trashed:
		return Trashed
	case !o.Journaled && o.Exists:
		return Unjournaled
	case o.Journaled && !o.Exists && !o.Trashed:
		if pv != nil {
			return Dangling
		}
		return JournalOnly
	case pv == nil:
		return Orphaned
	case pv.Attached:
		return InUse
	case pv.Phase == "Released":
		return Released
	}
	return Bound
}

// Deletable reports whether an entry is an orphan older than grace at now: only what no PV or
// VolumeSnapshotContent names, whose journal entry and object both exist, and whose creation
// time is known. An unknown time never qualifies: age is what keeps a create in flight (its PV
// not written yet) from looking orphaned. An object that names its Kubernetes cluster
// (owner.ClusterName) qualifies only when that is cluster, the one whose PVs were listed: on a
// Ceph cluster shared by several Kubernetes clusters, every volume of the others has no PV here.
func Deletable(e Entry, now time.Time, grace time.Duration, cluster string) bool {
	if name, ok := e.Owner[owner.ClusterName]; ok && name != cluster {
		return false
	}
	return e.State == Orphaned && e.Handle != "" && !e.Created.IsZero() && now.Sub(e.Created) >= grace
}
