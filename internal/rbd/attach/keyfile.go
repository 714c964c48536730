package attach

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/hostexec"
)

// confName is an empty configuration file the Ceph tools read instead of /etc/ceph/ceph.conf,
// so nothing on the host changes where or how they connect. Its base name must be ceph.conf:
// Ceph takes the cluster name from it ("x.conf" means cluster "x").
const confName = "ceph.conf"

// credentialArgs writes the key to a fresh 0600 file in dir and returns the arguments every
// Ceph tool takes to connect as cred: the key itself never appears on a command line, where
// any user on the node could read it in /proc. remove deletes the key file; call it as soon
// as the tool has authenticated.
func credentialArgs(dir, monHost string, cred ceph.Credentials, connectTimeout time.Duration) (args []string, remove func(), err error) {
	conf := filepath.Join(dir, confName)
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		return nil, nil, err
	}
	keyFile, remove, err := hostexec.WriteKeyFile(dir, cred.Key())
	if err != nil {
		return nil, nil, err
	}
	args = []string{
		"-c", conf, "-m", monHost, "--id", cred.ID, "--keyfile", keyFile,
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
	return hostexec.RemoveKeyFiles(dir, confName)
}
