package rbd

import (
	"context"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
)

// checkGroupSources checks that every source volume exists (a deleted volume kept for its
// snapshots does not).
func checkGroupSources(ctx context.Context, p radosop.Location, volumes []volid.RBDVolume) error {
	_, err := radosop.With(ctx, p, "inspect source volumes", func(io *rados.IOContext) (struct{}, error) {
		for _, v := range volumes {
			st, err := inspect(io, rbdname.Image(v.UID))
			if err != nil {
				return struct{}{}, err
			}
			if !st.exists || st.deleted {
				return struct{}{}, controller.NotFoundf("source volume %s does not exist", v.String())
			}
		}
		return struct{}{}, nil
	})
	return err
}

// cutGroupSnapshot makes the group snapshot uid of the volumes' images, each step idempotent:
// the group and its members, the group snapshot, then the members leave the group again (an
// image is in one group at most, and librbd refuses to remove or, on newer releases, trash a
// group member). It returns what the reservation records of each member.
func cutGroupSnapshot(ctx context.Context, p radosop.Location, uid string, volumes []volid.RBDVolume) ([]groupMember, error) {
	group, gsnap := rbdname.Group(uid), rbdname.GroupSnapshot(uid)
	cut, err := radosop.WithConn(ctx, p, "group "+group, func(r *rados.Conn, io *rados.IOContext) (bool, error) {
		if err := rbd.GroupCreate(io, group); err != nil && !ceph.Is(err, ceph.ErrExists) {
			return false, err
		}
		state, found, err := groupSnapState(io, group, gsnap)
		if err != nil || (found && state == rbd.GroupSnapStateComplete) {
			return found, err
		}
		if found {
			// a cut that a crash interrupted stays incomplete; removing it removes the member
			// snapshots it made, and the cut starts over
			if err := rbd.GroupSnapRemove(io, group, gsnap); err != nil && !isNotFound(err) {
				return false, err
			}
		}
		for _, v := range volumes {
			if err := join(r, io, group, rbdname.Image(v.UID)); err != nil {
				return false, err
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.CreateVolumeGroupSnapshot.grouped")
	if !cut {
		_, err := radosop.With(ctx, p, "group snapshot "+group+"@"+gsnap, func(io *rados.IOContext) (struct{}, error) {
			return struct{}{}, rbd.GroupSnapCreate(io, group, gsnap)
		})
		if err != nil {
			return nil, err
		}
		faultpoint.Hit("rbd.CreateVolumeGroupSnapshot.cut")
	}
	// each encrypted member is checked for a key rotation as a CSI snapshot is
	// (keyRotationAborts); the group snapshot is not acknowledged yet: the group goes, with
	// its snapshot and its members' snapshots, and the retry starts over
	_, err = radosop.With(ctx, p, "check "+group+"@"+gsnap+" for key rotations", func(io *rados.IOContext) (struct{}, error) {
		for _, v := range volumes {
			if err := withImage(io, rbdname.Image(v.UID), func(img *rbd.Image) error {
				return keyRotationAborts(io, img, func() error { return rbd.GroupRemove(io, group) })
			}); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	})
	if err != nil {
		return nil, err
	}
	return radosop.WithConn(ctx, p, "read members of "+group+"@"+gsnap, func(r *rados.Conn, io *rados.IOContext) ([]groupMember, error) {
		poolID := io.GetPoolID()
		members := make([]groupMember, 0, len(volumes))
		for _, v := range volumes {
			image := rbdname.Image(v.UID)
			if err := leaveGroup(r, io, image); err != nil {
				return nil, err
			}
			m, err := readMember(io, image, poolID, uid)
			if err != nil {
				return nil, err
			}
			m.UID = v.UID
			members = append(members, m)
		}
		return members, nil
	})
}

// groupSnapState finds the group snapshot gsnap of group.
func groupSnapState(io *rados.IOContext, group, gsnap string) (rbd.GroupSnapState, bool, error) {
	snaps, err := rbd.GroupSnapList(io, group)
	if err != nil {
		return 0, false, err
	}
	for _, s := range snaps {
		if s.Name == gsnap {
			return s.State, true, nil
		}
	}
	return 0, false, nil
}

// readMember reads size and creation time of the snapshot group snapshot uid cut of image.
func readMember(io *rados.IOContext, image string, poolID int64, uid string) (groupMember, error) {
	img, err := rbd.OpenImageReadOnly(io, image, rbd.NoSnapshot)
	if err != nil {
		return groupMember{}, err
	}
	defer img.Close()
	s, ok, err := rbdname.MemberSnapshot(img, poolID, uid)
	if err != nil {
		return groupMember{}, err
	}
	if !ok {
		return groupMember{}, ceph.NewError("read member", ceph.ErrInconsistent, "group snapshot "+rbdname.GroupSnapshot(uid)+" has no snapshot of "+image)
	}
	ts, err := img.GetSnapTimestamp(s.Id)
	if err != nil {
		return groupMember{}, err
	}
	size := s.Size
	// an encrypted volume's snapshot is of the image: the volume is that less its LUKS header
	if st, err := readEncryption(img); err != nil {
		return groupMember{}, err
	} else if st != nil && size > st.HeaderBytes {
		size -= st.HeaderBytes
	}
	return groupMember{Size: int64(size), Created: time.Unix(ts.Sec, ts.Nsec)}, nil
}

// join makes image a member of group. The caller holds the image's volume lock, and membership
// lasts only while a group snapshot is cut under that lock: membership of another group is
// what a killed process left, and is dropped.
func join(r *rados.Conn, io *rados.IOContext, group, image string) error {
	in, err := groupOf(io, image)
	if err != nil || in.Name == group {
		return err
	}
	if in.Name != "" {
		if err := leaveGroup(r, io, image); err != nil {
			return err
		}
	}
	return rbd.GroupImageAdd(io, group, io, image)
}

func groupOf(io *rados.IOContext, image string) (rbd.GroupInfo, error) {
	img, err := rbd.OpenImageReadOnly(io, image, rbd.NoSnapshot)
	if err != nil {
		return rbd.GroupInfo{}, err
	}
	defer img.Close()
	return img.GetGroup()
}

// leaveGroup removes image from the group it is a member of, if any. librbd leaves the
// image's member snapshots in place; they go with their group snapshot.
func leaveGroup(r *rados.Conn, io *rados.IOContext, image string) error {
	in, err := groupOf(io, image)
	if isNotFound(err) || (err == nil && in.Name == "") {
		return nil
	}
	if err != nil {
		return err
	}
	gio := io
	if in.PoolID != io.GetPoolID() {
		// an admin's group in another pool: librbd keeps group and image in one namespace
		pool, err := r.GetPoolByID(in.PoolID)
		if err != nil {
			return err
		}
		ns, err := io.GetNamespace()
		if err != nil {
			return err
		}
		if gio, err = r.OpenIOContext(pool); err != nil {
			return err
		}
		defer gio.Destroy()
		gio.SetNamespace(ns)
	}
	err = rbd.GroupImageRemove(gio, in.Name, io, image)
	if isNotFound(err) || ceph.Errno(err) == -int(syscall.EBADF) { // group gone, or not a member any more
		return nil
	}
	return err
}

// inGroup reports librbd's refusal to remove an image that is a group member.
func inGroup(err error) bool { return ceph.Errno(err) == -int(syscall.EMLINK) }

// removeGroupSnapshot removes the group snapshot uid and its group (librbd removes the member
// snapshots and drops members with them), then the deleted volumes only its members kept,
// then the reservation rec (if any): a crash at any step leaves what a retry completes.
func removeGroupSnapshot(ctx context.Context, p radosop.Location, uid string, rec *journal.Record, volumes []volid.RBDVolume) error {
	group := rbdname.Group(uid)
	_, err := radosop.With(ctx, p, "remove group "+group, func(io *rados.IOContext) (struct{}, error) {
		err := rbd.GroupRemove(io, group)
		if isNotFound(err) {
			err = nil
		}
		return struct{}{}, err
	})
	if err != nil {
		return err
	}
	faultpoint.Hit("rbd.DeleteVolumeGroupSnapshot.removed")
	_, err = radosop.WithConn(ctx, p, "collect deleted volumes", func(r *rados.Conn, io *rados.IOContext) (struct{}, error) {
		for _, v := range volumes {
			name := rbdname.Image(v.UID)
			st, err := inspect(io, name)
			if err != nil {
				return struct{}{}, err
			}
			if st.deleted {
				if err := deleteImage(r, io, name, false); err != nil {
					return struct{}{}, err
				}
			}
		}
		return struct{}{}, nil
	})
	if err != nil || rec == nil {
		return err
	}
	return journal.ReleaseRecord(ctx, p, journal.GroupSnapshot, rec)
}
