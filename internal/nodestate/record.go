package nodestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// RecordSuffix names the record next to the staging path.
const RecordSuffix = ".monoceph.json"

// RecordPath is the record of a staging path.
func RecordPath(stagingPath string) string { return filepath.Clean(stagingPath) + RecordSuffix }

// ReadRecord returns the record of a staging path, or nil when there is none. A record that is
// not JSON of T or whose "version" is not version is an error.
func ReadRecord[T any](stagingPath string, version int) (*T, error) {
	path := RecordPath(stagingPath)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r T
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("staging record %s: %w", path, err)
	}
	var h struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("staging record %s: %w", path, err)
	}
	if h.Version != version {
		return nil, fmt.Errorf("staging record %s: version %d, want %d", path, h.Version, version)
	}
	return &r, nil
}

// WriteRecord replaces the record of a staging path with r as indented JSON, atomically: a
// crash leaves the old record or the new one, never a torn file.
func WriteRecord(stagingPath string, r any) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(RecordPath(stagingPath), append(b, '\n'), 0o600)
}

// RemoveRecord removes the record of a staging path; one that is gone already is no error.
func RemoveRecord(stagingPath string) error {
	return ignoreNotExist(os.Remove(RecordPath(stagingPath)))
}

// WriteFileAtomic replaces the file at path with data (temporary file, fsync, rename, fsync of
// the directory): a crash leaves the old file or the new one, never a torn one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// stagingPathOf is the staging path a record path names.
func stagingPathOf(recordPath string) (string, bool) {
	return strings.CutSuffix(recordPath, RecordSuffix)
}
