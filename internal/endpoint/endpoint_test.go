package endpoint

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestSocketPath(t *testing.T) {
	tests := []struct {
		in, want string
		err      bool
	}{
		{"unix:///csi/csi.sock", "/csi/csi.sock", false},
		{"unix:/csi/csi.sock", "/csi/csi.sock", false},
		{"/csi/csi.sock", "/csi/csi.sock", false},
		{"unix:///csi//x/../csi.sock", "/csi/csi.sock", false},
		{"", "", true},
		{"unix://", "", true},
		{"tcp://127.0.0.1:10000", "", true},
	}
	for _, tt := range tests {
		got, err := SocketPath(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestListenUnixReplacesStaleSocketOnly(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "sub", "csi.sock")
	// a stale socket, as a SIGKILLed plugin leaves it
	l1, err := net.Listen("unix", filepath.Join(dir, "stale.sock"))
	if err != nil {
		t.Fatal(err)
	}
	l1.(*net.UnixListener).SetUnlinkOnClose(false)
	l1.Close()
	l, path, err := ListenUnix("unix://" + filepath.Join(dir, "stale.sock"))
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()
	if path != filepath.Join(dir, "stale.sock") {
		t.Fatalf("path = %q", path)
	}
	// parent directories are created
	l, _, err = ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	// a regular file is never deleted
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ListenUnix(file); err == nil {
		t.Fatal("listened over a regular file")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Fatal("regular file was touched")
	}
}
