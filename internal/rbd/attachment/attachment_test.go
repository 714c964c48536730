package attachment

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/volid"
)

func TestDiff(t *testing.T) {
	a := Publication{Mode: "SINGLE_NODE_WRITER"}
	clients := Clients{Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}, At: time.Unix(100, 0).UTC()}
	base := func() State {
		return State{Published: map[string]Publication{"n1": a}, Clients: map[string]Clients{"n1": clients}}
	}
	for _, c := range []struct {
		name      string
		old       State
		edit      func(*State)
		set, rm   []string
		del, noop bool
	}{
		{name: "nothing changed", old: base(), edit: func(*State) {}, noop: true},
		{name: "same clients written again", old: base(), edit: func(s *State) { s.Clients["n1"] = clients }, noop: true},
		{name: "second node", old: base(), edit: func(s *State) { s.Published["n2"] = a }, set: []string{"node.n2"}},
		{name: "read-only changes the key", old: base(), edit: func(s *State) { s.Published["n1"] = Publication{Mode: a.Mode, ReadOnly: true} }, set: []string{"node.n1"}},
		{name: "node unpublished, other left", old: func() State { s := base(); s.Published["n2"] = a; return s }(),
			edit: func(s *State) { delete(s.Published, "n1"); delete(s.Clients, "n1") }, rm: []string{"client.n1", "node.n1"}},
		{name: "last key goes with the object", old: base(), edit: func(s *State) { clear(s.Published); clear(s.Clients) }, del: true},
		{name: "a newer driver's key keeps the object", old: func() State { s := base(); s.other = map[string][]byte{"x": nil}; return s }(),
			edit: func(s *State) { clear(s.Published); clear(s.Clients) }, rm: []string{"client.n1", "node.n1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := c.old.clone()
			c.edit(&st)
			ch, err := diff(c.old, st)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.noop:
				if ch != nil {
					t.Fatalf("change %+v, want none", ch)
				}
				return
			case ch == nil:
				t.Fatal("no change")
			case ch.Delete != c.del:
				t.Fatalf("delete = %v", ch.Delete)
			}
			var set []string
			for k := range ch.Set {
				set = append(set, k)
			}
			slices.Sort(set)
			rm := slices.Sorted(slices.Values(ch.Rm))
			if !slices.Equal(set, c.set) || !slices.Equal(rm, c.rm) {
				t.Fatalf("set %v rm %v, want %v %v", set, rm, c.set, c.rm)
			}
			// what was written reads back as what was meant
			if !c.del {
				vals := map[string][]byte{}
				for _, k := range []string{"node.n1", "node.n2", "client.n1"} {
					if v, ok := encodeOld(t, c.old)[k]; ok {
						vals[k] = v
					}
				}
				for k, v := range ch.Set {
					vals[k] = v
				}
				for _, k := range ch.Rm {
					delete(vals, k)
				}
				got, err := decode("x", vals)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Nodes(), st.Nodes()) || len(got.Clients) != len(st.Clients) {
					t.Fatalf("reads back as %+v, want %+v", got, st)
				}
			}
		})
	}
}

func encodeOld(t *testing.T, s State) map[string][]byte {
	ch, err := diff(State{}, s)
	if err != nil || ch == nil {
		t.Fatalf("encode %+v: %v", s, err)
	}
	return ch.Set
}

func TestPublicationKinds(t *testing.T) {
	for _, c := range []struct {
		p              Publication
		single, writer bool
	}{
		{Publication{Mode: "SINGLE_NODE_WRITER"}, true, true},
		{Publication{Mode: "SINGLE_NODE_MULTI_WRITER"}, true, true},
		{Publication{Mode: "SINGLE_NODE_WRITER", ReadOnly: true}, true, false},
		{Publication{Mode: "SINGLE_NODE_READER_ONLY"}, true, false},
		{Publication{Mode: "MULTI_NODE_MULTI_WRITER"}, false, true},
		{Publication{Mode: "MULTI_NODE_READER_ONLY"}, false, false},
	} {
		if c.p.SingleNode() != c.single || c.p.Writer() != c.writer {
			t.Errorf("%+v: single %v writer %v", c.p, c.p.SingleNode(), c.p.Writer())
		}
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	if _, err := decode("x", map[string][]byte{"node.n1": []byte("{")}); err == nil {
		t.Fatal("a corrupt publication decoded")
	}
}

// TestKey: monoceph's volumes are keyed by their UID, ceph-csi's by their handle's UUID, and no
// key of one kind can be a key of the other (so a taken-over volume never shares an attachment
// object with a volume of monoceph's in the same pool).
func TestKey(t *testing.T) {
	const uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	mono := volid.RBDVolume{ClusterID: "rook-ceph", PoolID: 3, Namespace: "ns", UID: "abcdefghijklmnop"}.String()
	handle := volid.Handle{ClusterID: "rook-ceph", LocationID: 3, UUID: uuid}.String()
	for _, c := range []struct {
		id, key string
		ok      bool
	}{
		{mono, "abcdefghijklmnop", true},
		{handle, uuid, true},
		{volid.RBDSnapshot{RBDVolume: volid.RBDVolume{ClusterID: "c", PoolID: 1, UID: "abcdefghijklmnop"}, SnapUID: "bbcdefghijklmnop"}.String(), "", false},
		{handle[:len(handle)-1], "", false}, // a truncated handle
		{"0001-0009-rook-ceph-0000000000000003-" + "abcdefghijklmnop", "", false},
		{"pre-provisioned-volume", "", false},
		{"", "", false},
	} {
		key, ok := Key(c.id)
		if ok != c.ok || (ok && key != c.key) {
			t.Errorf("Key(%q) = %q, %v; want %q, %v", c.id, key, ok, c.key, c.ok)
		}
		if !ok {
			continue
		}
		// the kinds are disjoint: a UUID is never a UID and a UID never a UUID
		if volid.IsHandle(c.id) == volid.ValidUID(key) || volid.IsHandle(c.id) != (cephcsi.UUIDOf(key) == key) {
			t.Errorf("key %q of %q could be a key of the other format", key, c.id)
		}
	}
	for range 100 {
		uid, err := volid.NewUID('a')
		if err != nil {
			t.Fatal(err)
		}
		if cephcsi.UUIDOf(uid) != "" {
			t.Fatalf("UID %q reads as a UUID", uid)
		}
	}
}
