package kms

import (
	"errors"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
)

// RotationLockName is the RADOS lock a key rotation holds on the image's header object
// (rbd_header.<id>), with a lease it renews: it keeps two nodes from rotating one volume at
// once, and tells the controller a rotation is running (RotationUnderway).
const RotationLockName = "monoceph.key-rotation"

// RotationUnderway says whether a key rotation of img may be running or left pending: its lock
// is held (a lapsed lease is no holder), or the image has a pending DEK record. A snapshot (or a
// clone's transient snapshot) cut meanwhile keeps a header the rotation is changing while the
// DEK record, which snapshots do not keep, moves on: the controller cuts its snapshot, then
// asks this, and removes the snapshot when it answers true; the rotation records its pending DEK,
// then lists the snapshots, and refuses when there are any. Both orders are one RADOS object's
// (the header's lock, metadata and snapshot list), so one side sees the other.
//
// A pending record in Vault KV (vaulttokens) is not seen here: only the lock is. A rotation
// left pending there is finished or refused by its retry, which lists the snapshots first.
func RotationUnderway(io *rados.IOContext, img *rbd.Image) (bool, error) {
	id, err := img.GetId()
	if err != nil {
		return false, err
	}
	info, err := io.ListLockers("rbd_header."+id, RotationLockName)
	if err != nil && !errors.Is(err, rados.ErrNotFound) {
		return false, err
	}
	if info != nil && info.NumLockers > 0 {
		return true, nil
	}
	_, err = img.GetMetadata(PendingDEKKey)
	if errors.Is(err, rbd.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}
