// Package attachment records, in one RADOS object per RBD volume next to its image, which
// nodes the volume is published to and the Ceph client addresses each of those nodes uses for
// it. ControllerPublishVolume and ControllerUnpublishVolume write the publications, the node
// plugin writes its addresses at NodeStageVolume (it holds the volume's credentials then; the
// controller never learns a node's address otherwise), and unpublishing a lost node and the
// automatic fencing of out-of-service nodes read both.
//
//	object  monoceph.attach.<key>   (the image's pool and RADOS namespace; key: see Key)
//	key     node.<node ID>    →  {"mode":"SINGLE_NODE_WRITER","readOnly":false}
//	key     client.<node ID>  →  {"addrs":["10.0.0.5"],"at":"2026-11-24T08:00:00Z"}
//
// Every change is one version-guarded write (radosop.Update), so two controllers publishing
// the same volume to two nodes at once cannot both win, and a process killed at any point
// leaves either the old or the new state. An object left with no key is removed.
package attachment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volid"
)

const (
	nodePrefix   = "node."
	clientPrefix = "client."
	// maxKeys bounds one read: far more nodes than one volume is ever published to.
	maxKeys = 10000
)

// ObjectName is the attachment object of the volume whose key (see Key) is uid.
func ObjectName(uid string) string { return "monoceph.attach." + uid }

// Key is what names the attachment object of the volume volumeID identifies: the UID of a
// monoceph ID, or the UUID of a ceph-csi handle (a volume ceph-csi created, which monoceph took
// over; its image may sit next to monoceph's in one pool). The two can never coincide: a UID is
// 16 base32 characters, a UUID 36 hexadecimal digits and hyphens, and both parsers accept
// nothing else. ok is false for an ID of neither format (a pre-provisioned volume's own
// handle), which has no attachment object.
func Key(volumeID string) (key string, ok bool) {
	id, err := volid.ParseEither(volumeID, volid.ParseRBDVolume)
	if err != nil {
		return "", false
	}
	return KeyOf(id), true
}

// KeyOf is Key of an ID already parsed.
func KeyOf(id volid.Either[volid.RBDVolume]) string {
	if id.CSI != nil {
		return id.CSI.UUID
	}
	return id.Own.UID
}

// Publication is one node a volume is published to.
type Publication struct {
	// Mode is the CSI access mode's name (csi.VolumeCapability_AccessMode_Mode.String()).
	Mode     string `json:"mode"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// SingleNode reports whether the mode allows one node only (the SINGLE_NODE_* modes).
func (p Publication) SingleNode() bool { return strings.HasPrefix(p.Mode, "SINGLE_NODE_") }

// Writer reports whether the node may write: a single-node writer that is not read-only is
// what a second node must never run beside.
func (p Publication) Writer() bool {
	return !p.ReadOnly && !strings.HasSuffix(p.Mode, "_READER_ONLY")
}

// Clients are the Ceph client addresses a node's plugin uses, as the cluster sees them.
type Clients struct {
	Addrs []netip.Addr `json:"addrs"`
	At    time.Time    `json:"at"`
}

// State is the attachment object as read.
type State struct {
	Published map[string]Publication
	Clients   map[string]Clients
	// other holds keys this version does not know (a newer driver's), kept as they are.
	other map[string][]byte
}

func (s State) empty() bool {
	return len(s.Published) == 0 && len(s.Clients) == 0 && len(s.other) == 0
}

// Nodes are the nodes the volume is published to, sorted.
func (s State) Nodes() []string { return slices.Sorted(maps.Keys(s.Published)) }

func (s State) clone() State {
	return State{Published: maps.Clone(s.Published), Clients: maps.Clone(s.Clients), other: s.other}
}

func decode(oid string, vals map[string][]byte) (State, error) {
	st := State{Published: map[string]Publication{}, Clients: map[string]Clients{}, other: map[string][]byte{}}
	for k, v := range vals {
		var err error
		switch {
		case strings.HasPrefix(k, nodePrefix):
			var p Publication
			err = json.Unmarshal(v, &p)
			st.Published[k[len(nodePrefix):]] = p
		case strings.HasPrefix(k, clientPrefix):
			var c Clients
			err = json.Unmarshal(v, &c)
			st.Clients[k[len(clientPrefix):]] = c
		default:
			st.other[k] = v
		}
		if err != nil {
			return State{}, ceph.NewError("read "+oid, ceph.ErrInconsistent, fmt.Sprintf("key %q: %v", k, err))
		}
	}
	return st, nil
}

// diff is the omap change that turns old into new.
func diff(old, new State) (*radosop.Change, error) {
	c := &radosop.Change{Set: map[string][]byte{}}
	for node, p := range new.Published {
		if q, ok := old.Published[node]; !ok || q != p {
			b, err := json.Marshal(p)
			if err != nil {
				return nil, err
			}
			c.Set[nodePrefix+node] = b
		}
	}
	for node, cl := range new.Clients {
		if o, ok := old.Clients[node]; !ok || !slices.Equal(o.Addrs, cl.Addrs) || !o.At.Equal(cl.At) {
			b, err := json.Marshal(cl)
			if err != nil {
				return nil, err
			}
			c.Set[clientPrefix+node] = b
		}
	}
	for node := range old.Published {
		if _, ok := new.Published[node]; !ok {
			c.Rm = append(c.Rm, nodePrefix+node)
		}
	}
	for node := range old.Clients {
		if _, ok := new.Clients[node]; !ok {
			c.Rm = append(c.Rm, clientPrefix+node)
		}
	}
	if len(c.Set) == 0 && len(c.Rm) == 0 {
		return nil, nil
	}
	if new.empty() {
		return &radosop.Change{Delete: true}, nil
	}
	return c, nil
}

// Read returns the attachment state of the volume whose ID ends in uid (empty when it has
// none).
func Read(ctx context.Context, loc radosop.Location, uid string) (State, error) {
	oid := ObjectName(uid)
	return radosop.With(ctx, loc, "read "+oid, func(io *rados.IOContext) (State, error) {
		vals, _, err := radosop.ReadAll(io, oid, maxKeys)
		if err != nil {
			return State{}, err
		}
		return decode(oid, vals)
	})
}

// Modify reads the state, lets change edit a copy of it, and writes the difference guarded by
// the version read, retrying from a fresh read when another writer got there first. An error
// from change ends it with nothing written; so does a change that edits nothing. It returns
// the state written (or found).
func Modify(ctx context.Context, loc radosop.Location, uid, op string, change func(*State) error) (State, error) {
	oid := ObjectName(uid)
	var refused error // change's own error, returned as it is (a gRPC status), not as a Ceph failure
	st, err := radosop.Update(ctx, loc, op, oid, func(io *rados.IOContext) (*radosop.Change, uint64, State, error) {
		vals, ver, err := radosop.ReadAll(io, oid, maxKeys)
		if err != nil {
			return nil, 0, State{}, err
		}
		old, err := decode(oid, vals)
		if err != nil {
			return nil, 0, State{}, err
		}
		st := old.clone()
		if refused = change(&st); refused != nil {
			return nil, ver, old, refused
		}
		c, err := diff(old, st)
		return c, ver, st, err
	})
	if refused != nil {
		return st, refused
	}
	return st, err
}

// Remove deletes the attachment object of a deleted volume; a missing one is fine.
func Remove(ctx context.Context, loc radosop.Location, uid string) error {
	oid := ObjectName(uid)
	_, err := radosop.With(ctx, loc, "remove "+oid, func(io *rados.IOContext) (struct{}, error) {
		if err := io.Delete(oid); err != nil && !errors.Is(err, rados.ErrNotFound) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	return err
}
