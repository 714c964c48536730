// Package reftracker keeps, in one RADOS object per CephFS snapshot, the set of things that
// still need the snapshot (the CSI snapshot itself and every shallow volume backed by it) and
// their count, so the snapshot is removed exactly when nothing references it.
//
// Object monoceph.reftracker.<id>, omap:
//
//	ref.<reference>  ""        one key per reference
//	count            "<n>"     the number of ref.* keys, kept in the same atomic write
//
// Every change is one version-guarded write (package radosop): two writers can never both
// succeed on the same state. When the count reaches zero the object stays as a tombstone until
// the caller has removed the snapshot and calls Delete; a tombstone accepts no new reference,
// so nobody can attach to a snapshot that is being removed.
package reftracker

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
)

// Location is where trackers live (the filesystem's metadata pool and the driver's namespace).
type Location = radosop.Location

const (
	refPrefix = "ref."
	countKey  = "count"
	// maxRefs bounds one read of a tracker: far more shallow volumes than one snapshot serves.
	maxRefs = 100000
)

// ErrGone is returned by Add for a tracker whose count reached zero: its snapshot is being
// removed.
var ErrGone = ceph.NewError("add reference", ceph.ErrNotFound, "the snapshot is being removed")

// ObjectName is the tracker object of a snapshot ID.
func ObjectName(id string) string { return "monoceph.reftracker." + id }

// State is a tracker as read.
type State struct {
	Exists bool
	Refs   []string
}

func parse(vals map[string][]byte, ver uint64) (State, error) {
	if ver == 0 {
		return State{}, nil
	}
	st := State{Exists: true}
	for k := range vals {
		if r, ok := strings.CutPrefix(k, refPrefix); ok {
			st.Refs = append(st.Refs, r)
		}
	}
	sort.Strings(st.Refs)
	if n, err := strconv.Atoi(string(vals[countKey])); err != nil || n != len(st.Refs) {
		return st, ceph.NewError("reference tracker", ceph.ErrInconsistent, fmt.Sprintf("count %q does not match %d references", vals[countKey], len(st.Refs)))
	}
	return st, nil
}

func (s State) has(ref string) bool {
	i := sort.SearchStrings(s.Refs, ref)
	return i < len(s.Refs) && s.Refs[i] == ref
}

// update reads the tracker, lets decide compute the change from its state, and writes it
// guarded by the version read; it retries when it loses a race.
func update(ctx context.Context, loc Location, id, op string, decide func(State) (*radosop.Change, error)) (State, error) {
	oid := ObjectName(id)
	return radosop.Update(ctx, loc, op, oid, func(io *rados.IOContext) (*radosop.Change, uint64, State, error) {
		vals, ver, err := radosop.ReadAll(io, oid, maxRefs+1)
		if err != nil {
			return nil, 0, State{}, err
		}
		st, err := parse(vals, ver)
		if err != nil {
			return nil, 0, st, err
		}
		change, err := decide(st)
		if err != nil || change == nil {
			return nil, ver, st, err
		}
		return change, ver, after(st, *change), nil
	})
}

// after is the state a successful change leads to.
func after(st State, c radosop.Change) State {
	if c.Delete {
		return State{}
	}
	refs := map[string]bool{}
	for _, r := range st.Refs {
		refs[r] = true
	}
	for _, k := range c.Rm {
		delete(refs, strings.TrimPrefix(k, refPrefix))
	}
	for k := range c.Set {
		if r, ok := strings.CutPrefix(k, refPrefix); ok {
			refs[r] = true
		}
	}
	out := State{Exists: true}
	for r := range refs {
		out.Refs = append(out.Refs, r)
	}
	sort.Strings(out.Refs)
	return out
}

func withCount(set map[string][]byte, n int) map[string][]byte {
	set[countKey] = []byte(strconv.Itoa(n))
	return set
}

// Create makes the tracker with refs, if it does not exist yet (an existing one is left as it
// is: Create is idempotent).
func Create(ctx context.Context, loc Location, id string, refs ...string) (State, error) {
	return update(ctx, loc, id, "create reference tracker", func(st State) (*radosop.Change, error) {
		if st.Exists {
			return nil, nil
		}
		set := map[string][]byte{}
		for _, r := range refs {
			set[refPrefix+r] = nil
		}
		return &radosop.Change{Set: withCount(set, len(set))}, nil
	})
}

// Add adds ref (idempotent). A missing tracker is created with ifMissing plus ref, which is how
// snapshots made before trackers existed get one; a tombstone refuses with ErrGone.
func Add(ctx context.Context, loc Location, id, ref string, ifMissing ...string) (State, error) {
	return update(ctx, loc, id, "add reference", func(st State) (*radosop.Change, error) {
		switch {
		case !st.Exists:
			set := map[string][]byte{refPrefix + ref: nil}
			for _, r := range ifMissing {
				set[refPrefix+r] = nil
			}
			return &radosop.Change{Set: withCount(set, len(set))}, nil
		case len(st.Refs) == 0:
			return nil, ErrGone
		case st.has(ref):
			return nil, nil
		}
		return &radosop.Change{Set: withCount(map[string][]byte{refPrefix + ref: nil}, len(st.Refs)+1)}, nil
	})
}

// Remove drops ref (idempotent) and returns what is left. Removing the last reference leaves a
// tombstone: the caller removes the snapshot, then calls Delete.
func Remove(ctx context.Context, loc Location, id, ref string) (State, error) {
	return update(ctx, loc, id, "remove reference", func(st State) (*radosop.Change, error) {
		if !st.Exists || !st.has(ref) {
			return nil, nil
		}
		return &radosop.Change{Rm: []string{refPrefix + ref}, Set: withCount(map[string][]byte{}, len(st.Refs)-1)}, nil
	})
}

// Delete removes the tracker if it holds none of the references except those in unless, which
// go with it (a tracker whose snapshot is known gone still names the snapshot itself).
// It returns whether the tracker is gone.
func Delete(ctx context.Context, loc Location, id string, unless ...string) (bool, error) {
	st, err := update(ctx, loc, id, "delete reference tracker", func(st State) (*radosop.Change, error) {
		if !st.Exists {
			return nil, nil
		}
		ok := map[string]bool{}
		for _, r := range unless {
			ok[r] = true
		}
		for _, r := range st.Refs {
			if !ok[r] {
				return nil, nil
			}
		}
		return &radosop.Change{Delete: true}, nil
	})
	return !st.Exists, err
}

// Get reads a tracker.
func Get(ctx context.Context, loc Location, id string) (State, error) {
	return radosop.With(ctx, loc, "read reference tracker", func(io *rados.IOContext) (State, error) {
		vals, ver, err := radosop.ReadAll(io, ObjectName(id), maxRefs+1)
		if err != nil {
			return State{}, err
		}
		return parse(vals, ver)
	})
}
