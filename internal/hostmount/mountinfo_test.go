package hostmount

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMountIn(t *testing.T) {
	table := filepath.Join(t.TempDir(), "mountinfo")
	lines := "" +
		"22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
		"44 22 0:40 / /var/lib/kubelet/staging rw,nosuid,nodev,relatime - fuse.ceph-fuse ceph-fuse rw,user_id=0,group_id=0,allow_other\n" +
		"45 22 0:40 /.snap/s1/uuid /var/lib/kubelet/pods/a\\040b/mount ro,nosuid,nodev,relatime - fuse.ceph-fuse ceph-fuse rw\n" +
		"46 22 0:41 / /var/lib/kubelet/staging rw,relatime - ceph 10.0.0.1:6789:/volumes/x rw,name=admin\n"
	if err := os.WriteFile(table, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path     string
		wantID   int
		readOnly bool
	}{
		{path: "/var/lib/kubelet/staging", wantID: 46},                        // the topmost of two stacked mounts
		{path: "/var/lib/kubelet/staging/", wantID: 46},                       // cleaned
		{path: "/var/lib/kubelet/pods/a b/mount", wantID: 45, readOnly: true}, // \040 is a blank
		{path: "/var/lib/kubelet", wantID: 0},
	}
	for _, tt := range tests {
		m, err := MountIn(table, tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantID == 0 {
			if m != nil {
				t.Errorf("MountIn(%q) = %d, want nothing", tt.path, m.ID)
			}
			continue
		}
		if m == nil || m.ID != tt.wantID || ReadOnly(m) != tt.readOnly {
			t.Errorf("MountIn(%q) = %+v, want mount %d (read-only %v)", tt.path, m, tt.wantID, tt.readOnly)
		}
	}
	staging, _ := MountIn(table, "/var/lib/kubelet/staging")
	bind, _ := MountIn(table, "/var/lib/kubelet/pods/a b/mount")
	if SameFilesystem(staging, bind) {
		t.Error("mounts 0:41 and 0:40 count as the same filesystem")
	}
	if first, _ := MountIn(table, "/var/lib/kubelet/pods/a b/mount"); first != nil {
		other := *first
		other.Root = "/"
		if !SameFilesystem(first, &other) {
			t.Error("two mounts of device 0:40 are not the same filesystem")
		}
	}
	if ReadOnly(nil) || SameFilesystem(nil, staging) || SameFilesystem(staging, nil) {
		t.Error("nil mounts")
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

func TestUnescapeOctal(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:     "/a b",
		`/a\134b`:     `/a\b`,
		`/a\011b\012`: "/a\tb\n",
		`/plain`:      "/plain",
		`/short\04`:   `/short\04`,
		`/not\999`:    `/not\999`,
		// what the kernel writes
		`/var/lib/kubelet/pods/x/volumes`: `/var/lib/kubelet/pods/x/volumes`,
		`/mnt/with\040blank`:              `/mnt/with blank`,
		`/mnt/tab\011and\012newline`:      "/mnt/tab\tand\nnewline",
		`/mnt/back\134slash`:              `/mnt/back\slash`,
		`/mnt/back\134040slash`:           `/mnt/back\040slash`, // an escaped backslash before digits
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}
