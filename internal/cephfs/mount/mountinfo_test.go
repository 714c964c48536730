package mount

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMountAt(t *testing.T) {
	table := filepath.Join(t.TempDir(), "mountinfo")
	lines := "" +
		"22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n" +
		"44 22 0:40 / /var/lib/kubelet/staging rw,nosuid,nodev,relatime - fuse.ceph-fuse ceph-fuse rw,user_id=0,group_id=0,allow_other\n" +
		"45 22 0:40 /.snap/s1/uuid /var/lib/kubelet/pods/a\\040b/mount ro,nosuid,nodev,relatime - fuse.ceph-fuse ceph-fuse rw\n" +
		"46 22 0:41 / /var/lib/kubelet/staging rw,relatime - ceph 10.0.0.1:6789:/volumes/x rw,name=admin\n"
	if err := os.WriteFile(table, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	old := mountInfoPath
	mountInfoPath = table
	t.Cleanup(func() { mountInfoPath = old })

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
		m, err := MountAt(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		if tt.wantID == 0 {
			if m != nil {
				t.Errorf("MountAt(%q) = %d, want nothing", tt.path, m.ID)
			}
			continue
		}
		if m == nil || m.ID != tt.wantID || ReadOnly(m) != tt.readOnly || !IsCephFS(m) {
			t.Errorf("MountAt(%q) = %+v, want mount %d (read-only %v)", tt.path, m, tt.wantID, tt.readOnly)
		}
	}
	staging, _ := MountAt("/var/lib/kubelet/staging")
	bind, _ := MountAt("/var/lib/kubelet/pods/a b/mount")
	if SameFilesystem(staging, bind) {
		t.Error("mounts 0:41 and 0:40 count as the same filesystem")
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
	} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInspectUnmounted(t *testing.T) {
	state, m, err := Inspect(context.Background(), t.TempDir(), time.Second)
	if err != nil || state != NotMounted || m != nil {
		t.Fatalf("Inspect = %v, %v, %v; want not mounted", state, m, err)
	}
}
