package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Recovery keys.
//
// A ceph-fuse daemon that dies takes its mount with it, and remounting needs the cephx key.
// The node has no secrets of its own: only NodeStageVolume carries them for sure
// (NodePublishVolume only when the StorageClass names a node-publish secret), and kubelet
// does not stage a volume again while it believes it staged. Remounting only when secrets
// come along would leave pods on a dead mount until they are rescheduled, and Recover could do
// nothing after a plugin restart — the very event that kills FUSE daemons running in the
// plugin's container.
//
// So for the life of a FUSE staging the key is kept in a 0600 file in the volume's 0700
// directory under the root-only state directory, written at stage and refreshed by every
// stage (secrets may rotate), removed at unstage, and swept by Recover when its volume is
// gone. It adds little to what root on the node can already read (the daemon holds the key in
// memory; kubelet can read the Secret), and a state directory on a tmpfs (under /run) keeps it
// off disk: the key then lives exactly as long as the mounts that need it, which a reboot
// ends too. Mount helpers still get the key through their own short-lived files, removed as
// soon as the helper returns. Kernel mounts keep no key: the kernel client reconnects by
// itself.

const recoveryKeyName = "recovery.key"

func recoveryKeyPath(r *record) string { return filepath.Join(r.WorkDir, recoveryKeyName) }

// saveRecoveryKey keeps the key of cred for remounting r's FUSE mount.
func saveRecoveryKey(r *record, cred ceph.Credentials) error {
	if err := nodestate.WriteFileAtomic(recoveryKeyPath(r), []byte(cred.Key()), 0o600); err != nil {
		return fmt.Errorf("saving the recovery key: %w", err)
	}
	return nil
}

// loadRecoveryKey returns the credentials saved for r.
func loadRecoveryKey(r *record) (ceph.Credentials, error) {
	b, err := os.ReadFile(recoveryKeyPath(r))
	if err != nil {
		return ceph.Credentials{}, err
	}
	return ceph.NewCredentials(r.CephUser, string(b))
}

func removeRecoveryKey(r *record) error {
	if err := os.Remove(recoveryKeyPath(r)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

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
