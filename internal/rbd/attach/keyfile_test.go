package attach

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCredentialArgs(t *testing.T) {
	cred, key := testCred(t)
	dir := t.TempDir()
	args, remove, err := credentialArgs(dir, "mon1,mon2", cred, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	kf := argAfter(args, "--keyfile")
	if b, err := os.ReadFile(kf); err != nil || string(b) != key {
		t.Fatalf("key file holds %q, %v", b, err)
	}
	if argAfter(args, "-c") != filepath.Join(dir, "ceph.conf") || argAfter(args, "-m") != "mon1,mon2" || argAfter(args, "--id") != "csi-node" {
		t.Fatalf("args = %q", args)
	}
	if args[len(args)-1] != "--client_mount_timeout=1" {
		t.Fatalf("a sub-second connect timeout must round up to 1 s, not 0 (no timeout): %q", args)
	}
	for _, a := range args {
		if strings.Contains(a, key) {
			t.Fatalf("key on the command line: %q", args)
		}
	}
	remove()
	if err := removeCredentialFiles(dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}
