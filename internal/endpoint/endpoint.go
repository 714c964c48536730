// Package endpoint turns CSI endpoints into unix socket paths and listens on them, for the
// gRPC servers and for the mount holder's own socket protocol alike.
package endpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// SocketPath turns a CSI endpoint ("unix:///csi/csi.sock", "unix:/csi/csi.sock" or a bare
// path) into the socket's file path. The CSI spec only defines unix sockets for plugins.
func SocketPath(endpoint string) (string, error) {
	ep := strings.TrimSpace(endpoint)
	switch {
	case ep == "":
		return "", errors.New("endpoint is empty (set --endpoint or CSI_ENDPOINT)")
	case strings.HasPrefix(ep, "unix://"):
		ep = strings.TrimPrefix(ep, "unix://")
	case strings.HasPrefix(ep, "unix:"):
		ep = strings.TrimPrefix(ep, "unix:")
	case strings.Contains(ep, "://"):
		return "", fmt.Errorf("endpoint %q: only unix:// sockets are supported", endpoint)
	}
	if ep == "" {
		return "", fmt.Errorf("endpoint %q has no socket path", endpoint)
	}
	return filepath.Clean(ep), nil
}

// ListenUnix listens on the endpoint's socket. A socket file left behind by a killed process
// is removed first; any other kind of file at that path is an error, never deleted.
func ListenUnix(endpoint string) (net.Listener, string, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, "", err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, "", fmt.Errorf("endpoint %s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, "", fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, "", fmt.Errorf("create socket directory: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s: %w", path, err)
	}
	return lis, path, nil
}
