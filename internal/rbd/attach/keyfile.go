package attach

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
)

const (
	keyFilePattern = "keyfile-*"
	// confName is an empty configuration file the Ceph tools read instead of
	// /etc/ceph/ceph.conf, so nothing on the host changes where or how they connect. Its base
	// name must be ceph.conf: Ceph takes the cluster name from it ("x.conf" means cluster "x").
	confName = "ceph.conf"
)

// credentialArgs writes the key to a fresh 0600 file in dir and returns the arguments every
// Ceph tool takes to connect as cred: the key itself never appears on a command line, where
// any user on the node could read it in /proc. remove deletes the key file; call it as soon
// as the tool has authenticated.
func credentialArgs(dir, monHost string, cred ceph.Credentials, connectTimeout time.Duration) (args []string, remove func(), err error) {
	conf := filepath.Join(dir, confName)
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		return nil, nil, err
	}
	f, err := os.CreateTemp(dir, keyFilePattern) // 0600
	if err != nil {
		return nil, nil, err
	}
	remove = func() { _ = os.Remove(f.Name()) }
	if _, err := f.WriteString(cred.Key()); err != nil {
		f.Close()
		remove()
		return nil, nil, err
	}
	if err := f.Close(); err != nil {
		remove()
		return nil, nil, err
	}
	args = []string{
		"-c", conf, "-m", monHost, "--id", cred.ID, "--keyfile", f.Name(),
		// the default (300 s) would outlive the command timeout
		"--client_mount_timeout=" + strconv.Itoa(max(1, int(connectTimeout.Round(time.Second)/time.Second))),
	}
	return args, remove, nil
}

// removeCredentialFiles deletes key files a crashed Attach may have left in dir, and the
// empty configuration file.
func removeCredentialFiles(dir string) error {
	if dir == "" {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if n := e.Name(); n == confName || strings.HasPrefix(n, "keyfile-") {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
