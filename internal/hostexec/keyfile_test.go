package hostexec

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	const key = "AQBr3V5kAAAAABAAbWFkZS11cCB0ZXN0IGtleQ=="
	path, remove, err := WriteKeyFile(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || filepath.Dir(path) != dir {
		t.Fatalf("key file %s: %v, %v; want mode 0600 in %s", path, fi, err, dir)
	}
	if b, _ := os.ReadFile(path); string(b) != key {
		t.Fatalf("key file holds %q", b)
	}
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("key file after remove: %v", err)
	}

	// what a crash leaves behind
	if _, _, err := WriteKeyFile(dir, key); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ceph.conf", "ceph-fuse.log"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveKeyFiles(dir, "ceph.conf"); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "ceph-fuse.log" {
		t.Fatalf("left behind: %v, want only ceph-fuse.log", entries)
	}
	for _, d := range []string{filepath.Join(dir, "missing"), ""} {
		if err := RemoveKeyFiles(d); err != nil {
			t.Fatalf("RemoveKeyFiles(%q) = %v", d, err)
		}
	}
}
