package nodestate

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WorkDirHashBytes is how much of the volume ID's SHA-256 names its work directory: enough to
// tell volumes apart, short enough to keep paths in it (a unix socket's 107 bytes) short.
const WorkDirHashBytes = 12

// WorkDir is the volume's directory under the state directory. Volume IDs are hashed: they may
// hold any character and be up to 128 bytes long.
func WorkDir(stateDir, volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(stateDir, hex.EncodeToString(sum[:WorkDirHashBytes]))
}

// indexName is a symbolic link in the work directory to the volume's record, for calls that
// do not carry the staging path.
const indexName = "record"

// WriteIndex links workDir to the record of stagingPath (atomically, and only when it does not
// already).
func WriteIndex(workDir, stagingPath string) error {
	link := filepath.Join(workDir, indexName)
	if t, err := os.Readlink(link); err == nil && t == RecordPath(stagingPath) {
		return nil
	}
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(RecordPath(stagingPath), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// RemoveIndex removes the index of workDir; one that is gone already is no error.
func RemoveIndex(workDir string) error {
	return ignoreNotExist(os.Remove(filepath.Join(workDir, indexName)))
}

// IndexedStagingPath follows the index of workDir to the staging path of its record; false
// when there is no index. The record itself may be gone or belong to another volume: callers
// check what they read.
func IndexedStagingPath(workDir string) (string, bool, error) {
	link := filepath.Join(workDir, indexName)
	t, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	stagingPath, ok := stagingPathOf(t)
	if !ok {
		return "", false, fmt.Errorf("index %s points to %q, not a staging record", link, t)
	}
	return stagingPath, true, nil
}

// MakeStateDir creates the state directory, private to root (0700); MkdirAll leaves an
// existing directory as it is, so its mode is set as well: keys pass through it.
func MakeStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// WorkDirs lists the work directories under stateDir (the directories in it; sockets and
// other files are not).
func WorkDirs(stateDir string) ([]string, error) {
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(stateDir, e.Name()))
		}
	}
	return dirs, nil
}
