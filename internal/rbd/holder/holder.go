// Package holder says which Ceph clients hold an RBD image: its watchers (every client with the
// image open for writing registers a watch on the image header; read-only opens do not) and
// the owner of its exclusive lock, each with the address it reaches the cluster from.
//
// A watcher is a live client. A lock owner without a watch is a dead or cut-off one: librbd
// breaks such a lock when another client wants it, blocklisting the old owner first
// (rbd_blocklist_on_break_lock), so it can never write again. Whether a node "holds" an image
// is therefore decided by its watchers that the blocklist does not cover.
//
// rbd-mirror daemons are no node's clients and are left out: the peer site's daemon watches a
// mirrored primary image (to learn of its mirror snapshots) and the local one a secondary
// image (which it writes), for as long as the image is mirrored.
package holder

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
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
// and lock owners, rbd-mirror daemons left out (and the lock a daemon owns: it is no dead
// client's to break).
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
	var daemons map[uint64]bool
	if len(ws) > 0 {
		if daemons, err = mirrorDaemons(io, img); err != nil {
			return nil, fmt.Errorf("rbd-mirror daemons watching %s: %w", image, err)
		}
	}
	var out Set
	skip := map[string]bool{} // the daemons' instances
	for _, w := range ws {
		a, inst, err := blocklist.ParseEntityAddr(w.Addr)
		if err != nil {
			return nil, fmt.Errorf("watcher of %s: %w", image, err)
		}
		if daemons[uint64(w.Id)] {
			skip[inst] = true
			continue
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
		if skip[inst] {
			continue
		}
		out = append(out, Holder{Addr: a, Inst: inst, Client: l.Client, Lock: true, Cookie: l.Cookie})
	}
	return out, nil
}

// mirroringObject is the object of a pool (namespace) that every rbd-mirror daemon working
// on it watches, the local site's and the peer sites' alike: its pool watcher learns there of
// images whose mirroring is enabled or disabled. librbd's own clients only notify it; no
// node's client ever watches it.
const mirroringObject = "rbd_mirroring"

// mirrorNoop is a notification of mirroringObject that its watchers acknowledge without acting
// on it: librbd's mirroring NotifyMessage (ENCODE_START(1, 1): version 1, compat 1, length 4)
// with an op no release defines, which decodes to UnknownPayload.
var mirrorNoop = []byte{1, 1, 4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}

// mirrorNotifyTimeout bounds the wait for a daemon's acknowledgement (librbd's own notify
// timeout): one that does not answer in time is still named, among the timeouts.
const mirrorNotifyTimeout = 5 * time.Second

// mirrorDaemons returns the global IDs of the rbd-mirror daemons' clients, for a mirrored img:
// the clients watching mirroringObject, found by a notification of it (librados lists an
// object's watchers only in C++; a notification's answer names every watcher, acknowledged or
// timed out). A watcher of the image with such an ID is the same client, the daemon. An image
// not mirrored has no daemon watching it: nil, and no notification.
func mirrorDaemons(io *rados.IOContext, img *rbd.Image) (map[uint64]bool, error) {
	info, err := img.GetMirrorImageInfo()
	if err != nil {
		return nil, err
	}
	if info.State != rbd.MirrorImageEnabled && info.State != rbd.MirrorImageDisabling {
		return nil, nil
	}
	acks, timeouts, err := io.NotifyWithTimeout(mirroringObject, mirrorNoop, mirrorNotifyTimeout)
	switch {
	case ceph.Is(err, ceph.ErrNotFound):
		return nil, nil // the pool was never mirrored
	case err != nil && !ceph.Is(err, ceph.ErrTimeout):
		// a timeout: a watcher did not acknowledge in time, and the answer still names it
		return nil, err
	}
	ids := map[uint64]bool{}
	for _, a := range acks {
		ids[uint64(a.NotifierID)] = true
	}
	for _, t := range timeouts {
		ids[uint64(t.NotifierID)] = true
	}
	return ids, nil
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
