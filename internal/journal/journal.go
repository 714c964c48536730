// Package journal reserves CSI request names for volumes and snapshots in RADOS omaps, so that a
// create is idempotent by name and a process killed at any step leaves a reservation that a
// retry resumes and a delete removes.
//
// A reservation maps a request name to a UID (see package volid) and remembers the request's
// attributes. Both directions are written in one atomic RADOS write op on one object, guarded
// by the object version, so a reservation is never half written and two writers can never
// both win:
//
//	object  monoceph.journal.<shard>         (shard = first character of the UID)
//	key     <kind>.name.<request name>  →  {"uid": …, "attrs": {…}}
//	key     <kind>.uid.<UID>            →  <request name>
//
// The journal lives next to what it describes (the RBD pool and namespace of the images; the
// CephFS metadata pool), so users whose caps are limited to one namespace can still use it.
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
)

// Kind separates the journals of different object kinds sharing a pool.
type Kind string

// Kinds of reservations.
const (
	Volume   Kind = "vol"
	Snapshot Kind = "snap"
	// GroupSnapshot reserves the names of group snapshots (their members are snapshots, or
	// RBD group snapshots the reservation names).
	GroupSnapshot Kind = "gsnap"
)

// Location is where a journal lives.
type Location = radosop.Location

// Record is one reservation.
type Record struct {
	UID   string            `json:"uid"`
	Name  string            `json:"-"`
	Attrs map[string]string `json:"attrs,omitempty"`
}

func objectName(uid string) string { return "monoceph.journal." + uid[:1] }

func nameKey(k Kind, name string) string { return string(k) + ".name." + name }

func uidKey(k Kind, uid string) string { return string(k) + ".uid." + uid }

// ErrConflict is returned when concurrent writers kept winning; the RPC should answer ABORTED.
var ErrConflict = radosop.ErrConflict

func decode(name string, b []byte) (*Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || !volid.ValidUID(r.UID) {
		return nil, ceph.NewError("journal", ceph.ErrInconsistent, fmt.Sprintf("reservation of %q is corrupt", name))
	}
	r.Name = name
	return &r, nil
}

// Lookup returns the reservation of name, or nil if there is none.
func Lookup(ctx context.Context, loc Location, k Kind, name string) (*Record, error) {
	oid := objectName(string(volid.ShardOf(name)))
	return radosop.With(ctx, loc, "journal lookup", func(io *rados.IOContext) (*Record, error) {
		vals, _, err := radosop.ReadKeys(io, oid, nameKey(k, name))
		if err != nil {
			return nil, err
		}
		b, ok := vals[nameKey(k, name)]
		if !ok {
			return nil, nil
		}
		return decode(name, b)
	})
}

// Reserve returns the reservation of name, creating it with a new UID and attrs if there is
// none. created tells which happened; an existing reservation keeps its own attrs, for the
// caller to compare with the request.
func Reserve(ctx context.Context, loc Location, k Kind, name string, attrs map[string]string) (rec *Record, created bool, err error) {
	shard := volid.ShardOf(name)
	type result struct {
		rec     *Record
		created bool
	}
	res, err := radosop.Update(ctx, loc, "journal reserve", objectName(string(shard)), func(io *rados.IOContext) (*radosop.Change, uint64, result, error) {
		vals, ver, err := radosop.ReadKeys(io, objectName(string(shard)), nameKey(k, name))
		if err != nil {
			return nil, 0, result{}, err
		}
		if b, ok := vals[nameKey(k, name)]; ok {
			r, err := decode(name, b)
			return nil, ver, result{r, false}, err
		}
		uid, err := volid.NewUID(shard)
		if err != nil {
			return nil, 0, result{}, err
		}
		r := &Record{UID: uid, Name: name, Attrs: attrs}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, 0, result{}, err
		}
		return &radosop.Change{Set: map[string][]byte{nameKey(k, name): b, uidKey(k, uid): []byte(name)}}, ver, result{r, true}, nil
	})
	return res.rec, res.created, err
}

// Get returns the reservation a UID belongs to, or nil if there is none.
func Get(ctx context.Context, loc Location, k Kind, uid string) (*Record, error) {
	if !volid.ValidUID(uid) {
		return nil, nil
	}
	oid := objectName(uid)
	return radosop.With(ctx, loc, "journal get", func(io *rados.IOContext) (*Record, error) {
		vals, _, err := radosop.ReadKeys(io, oid, uidKey(k, uid))
		if err != nil {
			return nil, err
		}
		name, ok := vals[uidKey(k, uid)]
		if !ok {
			return nil, nil
		}
		// read both again in one op: a Release between the two reads removes both atomically,
		// so a name key missing next to a present UID key is real corruption, not a race
		vals, _, err = radosop.ReadKeys(io, oid, uidKey(k, uid), nameKey(k, string(name)))
		if err != nil {
			return nil, err
		}
		if string(vals[uidKey(k, uid)]) != string(name) {
			return nil, nil // released (or released and reserved again) meanwhile
		}
		b, ok := vals[nameKey(k, string(name))]
		if !ok {
			return nil, ceph.NewError("journal", ceph.ErrInconsistent, fmt.Sprintf("UID %s names %q, which has no reservation", uid, name))
		}
		r, err := decode(string(name), b)
		if err == nil && r.UID != uid {
			// the name was released and reserved again: this UID is history
			return nil, nil
		}
		return r, err
	})
}

// SetAttrs replaces the attributes of an existing reservation (for example to record a step's
// result). It fails with ErrNotFound if the reservation is gone.
func SetAttrs(ctx context.Context, loc Location, k Kind, rec *Record) error {
	oid := objectName(rec.UID)
	gone := ceph.NewError("journal update", ceph.ErrNotFound, "reservation of "+rec.Name+" is gone")
	_, err := radosop.Update(ctx, loc, "journal update", oid, func(io *rados.IOContext) (*radosop.Change, uint64, struct{}, error) {
		vals, ver, err := radosop.ReadKeys(io, oid, nameKey(k, rec.Name))
		if err != nil {
			return nil, 0, struct{}{}, err
		}
		cur, ok := vals[nameKey(k, rec.Name)]
		if !ok || ver == 0 {
			return nil, 0, struct{}{}, gone
		}
		if r, err := decode(rec.Name, cur); err != nil || r.UID != rec.UID {
			return nil, 0, struct{}{}, gone
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, 0, struct{}{}, err
		}
		return &radosop.Change{Set: map[string][]byte{nameKey(k, rec.Name): b}}, ver, struct{}{}, nil
	})
	return err
}

// Release removes the reservation a UID belongs to. Releasing what is not reserved succeeds,
// and a name reserved again under another UID is left alone.
func Release(ctx context.Context, loc Location, k Kind, uid string) error {
	if !volid.ValidUID(uid) {
		return nil
	}
	oid := objectName(uid)
	_, err := radosop.Update(ctx, loc, "journal release", oid, func(io *rados.IOContext) (*radosop.Change, uint64, struct{}, error) {
		vals, ver, err := radosop.ReadKeys(io, oid, uidKey(k, uid))
		if err != nil {
			return nil, 0, struct{}{}, err
		}
		name, ok := vals[uidKey(k, uid)]
		if !ok {
			return nil, ver, struct{}{}, nil
		}
		// read again, with the name key: the version of this read guards the write
		c, ver, err := releaseChange(io, oid, k, &Record{UID: uid, Name: string(name)})
		return c, ver, struct{}{}, err
	})
	return err
}

// ReleaseRecord is Release for a reservation already read (by Get or Lookup): both keys are
// checked in one read, then removed in one write.
func ReleaseRecord(ctx context.Context, loc Location, k Kind, rec *Record) error {
	oid := objectName(rec.UID)
	_, err := radosop.Update(ctx, loc, "journal release", oid, func(io *rados.IOContext) (*radosop.Change, uint64, struct{}, error) {
		c, ver, err := releaseChange(io, oid, k, rec)
		return c, ver, struct{}{}, err
	})
	return err
}

// releaseChange reads both keys of rec and the object's first keys in one operation and
// returns the change removing those of the two that still belong to rec — the whole object
// when nothing else is in it, so a journal whose reservations are all released leaves no
// object behind.
func releaseChange(io *rados.IOContext, oid string, k Kind, rec *Record) (*radosop.Change, uint64, error) {
	nk, uk := nameKey(k, rec.Name), uidKey(k, rec.UID)
	vals, first, ver, err := radosop.Read(io, oid, 3, nk, uk)
	if err != nil {
		return nil, 0, err
	}
	var rm []string
	if string(vals[uk]) == rec.Name {
		rm = append(rm, uk)
	}
	if b, ok := vals[nk]; ok {
		if r, err := decode(rec.Name, b); err != nil || r.UID == rec.UID {
			rm = append(rm, nk)
		}
	}
	if len(rm) == 0 {
		return nil, ver, nil
	}
	if radosop.Emptied(first, rm) {
		return &radosop.Change{Delete: true}, ver, nil
	}
	return &radosop.Change{Rm: rm}, ver, nil
}

// List returns every reservation of kind k at loc, sorted by UID.
func List(ctx context.Context, loc Location, k Kind) ([]Record, error) {
	return radosop.With(ctx, loc, "journal list", func(io *rados.IOContext) ([]Record, error) {
		var out []Record
		prefix := string(k) + ".name."
		for i := range volid.Shards {
			oid := objectName(volid.Alphabet[i : i+1])
			vals, err := io.GetAllOmapValues(oid, "", prefix, 1000)
			if errors.Is(err, rados.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			for key, b := range vals {
				r, err := decode(strings.TrimPrefix(key, prefix), b)
				if err != nil {
					return nil, err
				}
				out = append(out, *r)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
		return out, nil
	})
}
