package attach

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestUnescapeMountPath(t *testing.T) {
	tests := map[string]string{
		`/var/lib/kubelet/pods/x/volumes`: `/var/lib/kubelet/pods/x/volumes`,
		`/mnt/with\040blank`:              `/mnt/with blank`,
		`/mnt/tab\011and\012newline`:      "/mnt/tab\tand\nnewline",
		`/mnt/back\134slash`:              `/mnt/back\slash`,
	}
	for in, want := range tests {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMountAt(t *testing.T) {
	if m, err := MountAt("/proc"); err != nil || m == nil || m.FsType != "proc" {
		t.Fatalf("MountAt(/proc) = %+v, %v", m, err)
	}
	if m, err := MountAt(t.TempDir()); err != nil || m != nil {
		t.Fatalf("MountAt(plain directory) = %+v, %v", m, err)
	}
}

func TestStatWithin(t *testing.T) {
	if fi, err := statWithin(context.Background(), "/"); err != nil || !fi.IsDir() {
		t.Fatalf("statWithin(/) = %v, %v", fi, err)
	}
	if _, err := statWithin(context.Background(), "/no/such/path"); !os.IsNotExist(err) {
		t.Fatalf("statWithin(missing) = %v, want ENOENT", err)
	}
}

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
