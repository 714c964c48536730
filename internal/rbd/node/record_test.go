package node

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
)

func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	staging := filepath.Join(dir, "globalmount")
	if r, err := readRecord(staging); r != nil || err != nil {
		t.Fatalf("record before stage = %v, %v", r, err)
	}
	req := stageRequest{
		volumeID: "rv1:local:1::abc", stagingPath: staging,
		access: access{fsType: "xfs", mountFlags: []string{"noatime"}},
		image:  volumecontext.Image{ClusterID: "local", Pool: "rbd", Namespace: "ns", Name: "img", Mounter: volumecontext.MounterFuse},
	}
	rec := newRecord(req, filepath.Join(dir, "work"))
	rec.Attachment.Device = "/dev/loop7"
	if err := rec.write(); err != nil {
		t.Fatal(err)
	}
	got, err := readRecord(staging + "/") // paths are cleaned
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, rec)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "globalmount.monoceph.json" {
		t.Fatalf("directory holds %v, want only the record (no temporary files)", entries)
	}
	if err := rec.remove(); err != nil {
		t.Fatal(err)
	}
	if err := rec.remove(); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	if err := os.WriteFile(nodestate.RecordPath(staging), []byte(`{"version":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecord(staging); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("unknown version: %v", err)
	}
}

func TestRecordConflict(t *testing.T) {
	base := stageRequest{
		volumeID: "v", stagingPath: "/s",
		access: access{fsType: "ext4", mountFlags: []string{"noatime", "discard"}},
		image:  volumecontext.Image{ClusterID: "local", Pool: "rbd", Name: "img", Mounter: volumecontext.MounterFuse},
		cred:   ceph.Credentials{},
	}
	rec := newRecord(base, "/w")
	tests := []struct {
		name string
		edit func(*stageRequest)
		want string
	}{
		{"same", func(*stageRequest) {}, ""},
		{"flags in another order", func(r *stageRequest) { r.access.mountFlags = []string{"discard", "noatime"} }, ""},
		{"block", func(r *stageRequest) { r.access = access{block: true} }, "staged for mount access"},
		{"fs type", func(r *stageRequest) { r.access.fsType = "xfs" }, "fs_type ext4"},
		{"flags", func(r *stageRequest) { r.access.mountFlags = []string{"noatime"} }, "mount_flags"},
		{"read-only", func(r *stageRequest) { r.access.readOnly = true }, "staged read-write"},
		{"image", func(r *stageRequest) { r.image.Name = "other" }, "holds image rbd/img"},
		{"mounter", func(r *stageRequest) { r.image.Mounter = volumecontext.MounterKRBD }, "mounter fuse"},
	}
	for _, tt := range tests {
		r := base
		r.access.mountFlags = append([]string(nil), base.access.mountFlags...)
		tt.edit(&r)
		got := rec.conflict(r)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: conflict = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestFindRecordThroughIndex(t *testing.T) {
	s := newTestServer(t, localMap, nil)
	staging := filepath.Join(t.TempDir(), "globalmount")
	req := stageRequest{volumeID: "vol-7", stagingPath: staging, image: volumecontext.Image{ClusterID: "local", Pool: "rbd", Name: "img", Mounter: "fuse"}}
	rec := newRecord(req, s.workDir("vol-7"))
	if err := os.MkdirAll(rec.Attachment.WorkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := rec.write(); err != nil {
		t.Fatal(err)
	}
	if err := s.writeIndex(rec); err != nil {
		t.Fatal(err)
	}
	if err := s.writeIndex(rec); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, path := range []string{"", staging} {
		got, err := s.findRecord("vol-7", path)
		if err != nil || got == nil || got.StagingPath != staging {
			t.Fatalf("findRecord(%q) = %+v, %v", path, got, err)
		}
	}
	if got, err := s.findRecord("vol-8", staging); got != nil || err != nil {
		t.Fatalf("another volume's staging path answered %+v, %v", got, err)
	}
	if got, err := s.findRecord("vol-8", ""); got != nil || err != nil {
		t.Fatalf("unknown volume answered %+v, %v", got, err)
	}
}
