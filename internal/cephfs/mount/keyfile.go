package mount

import (
	"errors"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/hostexec"
)

// writeKeyFile writes the key of cred to a fresh 0600 file in dir (the caller's private
// directory) and returns its path and a function that removes it. Call remove as soon as the
// helper returned: ceph-fuse and the kernel keep the key in memory once authenticated.
func writeKeyFile(dir string, cred ceph.Credentials) (path string, remove func(), err error) {
	if cred.Key() == "" {
		return "", nil, errors.New("no key to mount with")
	}
	return hostexec.WriteKeyFile(dir, cred.Key())
}
