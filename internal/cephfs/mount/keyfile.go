package mount

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/monoceph/monoceph/internal/ceph"
)

// keyFilePrefix names the short-lived key files mount helpers read.
const keyFilePrefix = "keyfile-"

// writeKeyFile writes the key of cred to a fresh 0600 file in dir (the caller's private
// directory) and returns its path and a function that removes it. Call remove as soon as the
// helper returned: ceph-fuse and the kernel keep the key in memory once authenticated.
func writeKeyFile(dir string, cred ceph.Credentials) (path string, remove func(), err error) {
	if cred.Key() == "" {
		return "", nil, errors.New("no key to mount with")
	}
	f, err := os.CreateTemp(dir, keyFilePrefix+"*") // 0600
	if err != nil {
		return "", nil, err
	}
	remove = func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(cred.Key()); err != nil {
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

// RemoveKeyFiles deletes key files a crashed mount left in dir.
func RemoveKeyFiles(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), keyFilePrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
