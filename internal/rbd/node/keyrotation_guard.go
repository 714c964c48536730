package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/kms"
)

// snapNamespaceMirror is librbd's RBD_SNAP_NAMESPACE_TYPE_MIRROR (go-ceph names no constant).
const snapNamespaceMirror = rbd.SnapNamespaceType(3)

// snapshotsRefusal is why img's snapshots keep its key from being rotated, "" when none does.
// A snapshot keeps the LUKS header of its time while the DEK record (image metadata) is not
// per snapshot, and a clone copies its parent's metadata when it is made: a volume restored or
// cloned from a user snapshot (a CSI snapshot, a clone's transient one) or a group snapshot
// (a CSI group snapshot's member) after the rotation would get the new DEK and the old header.
// Mirror snapshots are what the peer cluster's image is synchronised from, header and metadata
// each at its own time. Snapshots in the trash namespace are the sources of clones that are
// not flattened yet: a removed snapshot moves there only while clones of it exist, no new
// clone or restore can be made from it, and each of its clones copied (and wrapped again for
// itself) the DEK record when it was made, so the rotation of this image changes nothing they
// read; they are ignored.
func snapshotsRefusal(img *rbd.Image) (string, error) {
	snaps, err := img.GetSnapshotNames()
	if err != nil {
		return "", err
	}
	var user, group, mirror int
	for _, sn := range snaps {
		kind, err := img.GetSnapNamespaceType(sn.Id)
		if err != nil {
			return "", err
		}
		switch kind {
		case rbd.SnapNamespaceTypeTrash:
		case rbd.SnapNamespaceTypeGroup:
			group++
		case snapNamespaceMirror:
			mirror++
		default:
			user++
		}
	}
	var why []string
	if user > 0 {
		why = append(why, fmt.Sprintf("%d snapshots (CSI snapshots, or a clone's transient snapshot)", user))
	}
	if group > 0 {
		why = append(why, fmt.Sprintf("%d group snapshot members", group))
	}
	if len(why) > 0 {
		return "it has " + strings.Join(why, " and ") + ", which keep its current key slot: a rotation would leave them (and what is restored or cloned from them) without a key; delete them first", nil
	}
	if mirror > 0 {
		return fmt.Sprintf("it is mirrored (%d mirror snapshots): the peer's copy takes the header and the DEK record at different times, and could be left with a header its DEK does not open; disable mirroring first", mirror), nil
	}
	return "", nil
}

// errLeaseLost: the rotation lock's lease may have lapsed (a renewal failed, or none succeeded
// in time), so another node may be rotating the volume: the rotation stops, its pending record
// kept for a retry to finish.
var errLeaseLost = errors.New("the key rotation lock's lease may have lapsed (a renewal failed or is late); the rotation stopped, and a retry finishes it")

// leaseMargin is how long before its lease lapses the lock is no longer relied on: the time a
// header write or a KMS call started then may take, and clock drift between this node and the
// OSD that holds the lock.
func leaseMargin(lease time.Duration) time.Duration { return lease / 4 }

// leaseClock knows until when the rotation lock is held: the time of the last successful lock
// or renewal (taken before the request was sent) plus the lease. The first failed renewal ends
// it: the renewals stop, and the lock is not relied on any more.
type leaseClock struct {
	lease time.Duration
	mu    sync.Mutex
	last  time.Time
	lost  error
}

// renewed records the result of a lock or renewal sent at sent.
func (l *leaseClock) renewed(sent time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return
	}
	if err != nil {
		l.lost = err
		return
	}
	l.last = sent
}

// held is nil while the lock may be relied on at now, else errLeaseLost saying why.
func (l *leaseClock) held(now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost != nil {
		return fmt.Errorf("%w: renewing it: %v", errLeaseLost, l.lost)
	}
	if until := l.last.Add(l.lease - leaseMargin(l.lease)); !now.Before(until) {
		return fmt.Errorf("%w: the last renewal was at %s, %v ago", errLeaseLost, l.last.UTC().Format(time.RFC3339), now.Sub(l.last).Round(time.Millisecond))
	}
	return nil
}

// renewLoop renews every lease/3 with renew until stop is closed or a renewal fails.
func (l *leaseClock) renewLoop(stop <-chan struct{}, renew func() error) {
	t := time.NewTicker(l.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			sent := time.Now()
			err := renew()
			l.renewed(sent, err)
			if err != nil {
				return
			}
		}
	}
}

// checkHook, set by tests only, runs as Check starts: a snapshot it cuts stands for one cut
// between the rotation's first look for snapshots and this one.
var checkHook func(step string)

// Check is kms.Guard: once the pending DEK is recorded and right before it is committed, the
// lease must still hold and the image must have no snapshots a restore or clone could take the
// old header from (see snapshotsRefusal, and kms.RotationUnderway for the controller's side).
func (x *imageHeader) Check(_ context.Context, step string) error {
	if checkHook != nil {
		checkHook(step)
	}
	if x.lease != nil {
		if err := x.lease.held(time.Now()); err != nil {
			return err
		}
	}
	why, err := snapshotsRefusal(x.img)
	if err != nil {
		return err
	}
	if why != "" {
		return fmt.Errorf("%w at its %s step: %s", kms.ErrRefused, step, why)
	}
	return nil
}
