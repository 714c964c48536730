package node

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Recovery keys (see nodestate): a ceph-fuse daemon that dies takes its mount with it, and
// remounting needs the cephx key. Remounting only when an RPC brings secrets would leave pods
// on a dead mount until they are rescheduled, and Recover could do nothing after a plugin or
// mount holder restart, the very events that end FUSE daemons. Mount helpers still get the key
// through their own short-lived files, removed as soon as the helper returns. Kernel mounts
// keep no key: the kernel client reconnects by itself.

// saveRecoveryKey keeps the key of cred for remounting r's FUSE mount.
func saveRecoveryKey(r *record, cred ceph.Credentials) error {
	if err := nodestate.SaveRecoveryKey(r.WorkDir, cred.Key()); err != nil {
		return fmt.Errorf("saving the recovery key: %w", err)
	}
	return nil
}

// loadRecoveryKey returns the credentials saved for r.
func loadRecoveryKey(r *record) (ceph.Credentials, error) {
	key, err := nodestate.LoadRecoveryKey(r.WorkDir)
	if err != nil {
		return ceph.Credentials{}, err
	}
	return ceph.NewCredentials(r.CephUser, key)
}

func removeRecoveryKey(r *record) error { return nodestate.RemoveRecoveryKey(r.WorkDir) }

// remountCredentials picks the credentials to remount r with: the request's secrets when it
// carries any, else the recovery key.
func remountCredentials(r *record, secrets map[string]string) (ceph.Credentials, error) {
	if len(secrets) > 0 {
		return nodereq.Credentials(secrets, ceph.AdminFirst...)
	}
	cred, err := loadRecoveryKey(r)
	if errors.Is(err, fs.ErrNotExist) {
		return cred, status.Errorf(codes.FailedPrecondition,
			"the %s mount of volume %q at %s is broken and there is no key to remount it: the request carries no secrets and no recovery key is kept for it",
			r.Mounter, r.VolumeID, r.StagingPath)
	}
	if err != nil {
		return cred, status.Errorf(codes.Internal, "reading the recovery key of volume %q: %v", r.VolumeID, err)
	}
	return cred, nil
}
