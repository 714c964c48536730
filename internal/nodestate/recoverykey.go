package nodestate

import (
	"os"
	"path/filepath"
)

// Recovery keys.
//
// A FUSE mount whose daemon or server goes away needs the cephx key to come back, and the node
// has no secrets of its own: only NodeStageVolume carries them for sure, and kubelet does not
// stage a volume again while it believes it staged. So for the life of a FUSE staging the key
// is kept in a 0600 file in the volume's 0700 work directory under the root-only state
// directory: written at stage and refreshed by every stage (secrets may rotate), removed at
// unstage. It adds little to what root on the node can already read (the daemon holds the key
// in memory; kubelet can read the Secret), and a state directory on a tmpfs (under /run) keeps
// it off disk: the key then lives exactly as long as the mounts that need it, which a reboot
// ends too.

// RecoveryKeyName is the key's file in the work directory.
const RecoveryKeyName = "recovery.key"

// SaveRecoveryKey keeps key for the volume of workDir.
func SaveRecoveryKey(workDir, key string) error {
	return WriteFileAtomic(filepath.Join(workDir, RecoveryKeyName), []byte(key), 0o600)
}

// LoadRecoveryKey returns the key kept for the volume of workDir (fs.ErrNotExist: none).
func LoadRecoveryKey(workDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(workDir, RecoveryKeyName))
	return string(b), err
}

// RemoveRecoveryKey removes the key kept for the volume of workDir; none is no error.
func RemoveRecoveryKey(workDir string) error {
	return ignoreNotExist(os.Remove(filepath.Join(workDir, RecoveryKeyName)))
}
