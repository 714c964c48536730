package hostexec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// KeyFilePrefix names the short-lived key files commands read.
const KeyFilePrefix = "keyfile-"

// WriteKeyFile writes key to a fresh 0600 file in dir (the caller's private directory) and
// returns its path and a function that removes it. The key never goes on a command line, where
// any user of the node could read it in /proc; call remove as soon as the command has
// authenticated (the Ceph tools and the kernel keep the key in memory from then on).
func WriteKeyFile(dir, key string) (path string, remove func(), err error) {
	f, err := os.CreateTemp(dir, KeyFilePrefix+"*") // 0600
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(key); err != nil {
		f.Close()
		remove()
		return "", nil, err
	}
	if err := f.Close(); err != nil {
		remove()
		return "", nil, err
	}
	return f.Name(), remove, nil
}

// RemoveKeyFiles deletes the key files a crashed caller left in dir, and the files of dir named
// also. A dir that does not exist holds none.
func RemoveKeyFiles(dir string, also ...string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, KeyFilePrefix) || slices.Contains(also, n) {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
