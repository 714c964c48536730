// Package holder says which Ceph clients hold an RBD image: its watchers (every client with the
// image open for writing registers a watch on the image header; read-only opens do not) and
// the owner of its exclusive lock, each with the address it reaches the cluster from.
//
// A watcher is a live client. A lock owner without a watch is a dead or cut-off one: librbd
// breaks such a lock when another client wants it, blocklisting the old owner first
// (rbd_blocklist_on_break_lock), so it can never write again. Whether a node "holds" an image
// is therefore decided by its watchers that the blocklist does not cover.
package holder

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/blocklist"
)

// Holder is one client of an image.
type Holder struct {
	Addr   netip.Addr
	Inst   string // ip:port/nonce
	Client string // client.<id>
	Lock   bool   // the exclusive-lock owner (false: a watcher)
	Cookie string // of the lock, to break it
}

func (h Holder) String() string {
	what := "watcher"
	if h.Lock {
		what = "exclusive-lock owner"
	}
	return fmt.Sprintf("%s %s at %s", what, h.Client, h.Inst)
}

// List opens image read-only (which registers no watch of its own) and returns its watchers
// and lock owners.
func List(io *rados.IOContext, image string) (Set, error) {
	img, err := rbd.OpenImageReadOnly(io, image, rbd.NoSnapshot)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	ws, err := img.ListWatchers()
	if err != nil {
		return nil, err
	}
	var out Set
	for _, w := range ws {
		a, inst, err := blocklist.ParseEntityAddr(w.Addr)
		if err != nil {
			return nil, fmt.Errorf("watcher of %s: %w", image, err)
		}
		out = append(out, Holder{Addr: a, Inst: inst, Client: fmt.Sprintf("client.%d", w.Id)})
	}
	_, lockers, err := img.ListLockers()
	if err != nil {
		return nil, err
	}
	for _, l := range lockers {
		a, inst, err := blocklist.ParseEntityAddr(l.Addr)
		if err != nil {
			return nil, fmt.Errorf("lock owner of %s: %w", image, err)
		}
		out = append(out, Holder{Addr: a, Inst: inst, Client: l.Client, Lock: true, Cookie: l.Cookie})
	}
	return out, nil
}

// Set is the holders of one image.
type Set []Holder

// Watching reports whether the client instance inst has a watch on the image.
func (s Set) Watching(inst string) bool {
	return slices.ContainsFunc(s, func(h Holder) bool { return !h.Lock && h.Inst == inst })
}

// Live are the watchers the blocklist does not cut off: clients that can still write.
func (s Set) Live(bl blocklist.Blocklisted) Set {
	var out Set
	for _, h := range s {
		if !h.Lock && !bl.Covers(h.Addr, h.Inst) {
			out = append(out, h)
		}
	}
	return out
}

// At are the holders at any of addrs.
func (s Set) At(addrs []netip.Addr) Set {
	var out Set
	for _, h := range s {
		if slices.Contains(addrs, h.Addr) {
			out = append(out, h)
		}
	}
	return out
}

// Except are the holders at none of addrs.
func (s Set) Except(addrs []netip.Addr) Set {
	var out Set
	for _, h := range s {
		if !slices.Contains(addrs, h.Addr) {
			out = append(out, h)
		}
	}
	return out
}

// DeadLocks are lock owners without a watch: clients that died (or were cut off) holding the
// lock.
func (s Set) DeadLocks() Set {
	var out Set
	for _, h := range s {
		if h.Lock && !s.Watching(h.Inst) {
			out = append(out, h)
		}
	}
	return out
}

func (s Set) String() string {
	parts := make([]string, len(s))
	for i, h := range s {
		parts[i] = h.String()
	}
	return strings.Join(parts, ", ")
}
