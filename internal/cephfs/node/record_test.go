package node

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/nodestate"
)

func TestRecordRoundTrip(t *testing.T) {
	staging := filepath.Join(t.TempDir(), "globalmount")
	r := &record{VolumeID: "vol-1", State: stateStaged, StagingPath: staging, ClusterID: "c1", FSName: "myfs",
		RootPath: "/volumes/csi/sub/u", MountedPath: "/volumes/csi/sub", Mounter: "fuse", Options: []string{"debug"},
		ReadOnly: true, Shallow: &shallow{SnapshotName: "s", SnapshotDir: ".snap/s/u"}, CephUser: "csi", WorkDir: "/state/x"}
	if !r.addTarget("/t1", true) || r.addTarget("/t1", true) || !r.addTarget("/t2", false) {
		t.Fatal("addTarget reports changes wrongly")
	}
	if err := r.write(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(nodestate.RecordPath(staging))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v, %v", fi, err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(staging), ".*tmp*")); len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
	b, _ := os.ReadFile(nodestate.RecordPath(staging))
	if strings.Contains(string(b), testKey) {
		t.Fatal("the record holds the key")
	}
	got, err := readRecord(staging + "/")
	if err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("readRecord = %+v, %v; want %+v", got, err, r)
	}
	if !got.removeTarget("/t1") || got.removeTarget("/t1") || got.hasTarget("/t1") || !got.hasTarget("/t2") {
		t.Fatal("removeTarget")
	}
	if got.source() != filepath.Join(staging, ".snap/s/u") {
		t.Fatalf("source %s", got.source())
	}
	if err := r.remove(); err != nil {
		t.Fatal(err)
	}
	if r, err := readRecord(staging); r != nil || err != nil {
		t.Fatalf("after remove: %v, %v", r, err)
	}
	if err := r.remove(); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestReadRecordRejectsGarbage(t *testing.T) {
	staging := filepath.Join(t.TempDir(), "s")
	for _, content := range []string{"{", `{"version": 99}`} {
		if err := os.WriteFile(nodestate.RecordPath(staging), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readRecord(staging); err == nil {
			t.Errorf("readRecord accepted %q", content)
		}
	}
}

func TestRecordConflict(t *testing.T) {
	base := stageRequest{vol: volumecontext.Volume{ClusterID: "c1", FSName: "myfs", RootPath: "/volumes/g/s/u"}}
	rec := &record{ClusterID: "c1", FSName: "myfs", RootPath: "/volumes/g/s/u", Mounter: "fuse", Options: []string{"a", "b"}}
	tests := []struct {
		name    string
		mod     func(*stageRequest)
		options []string
		want    string
	}{
		{name: "same", options: []string{"b", "a"}},
		{name: "node's choice of mounter", mod: func(r *stageRequest) { r.vol.Mounter = "" }, options: []string{"a", "b"}},
		{name: "other path", mod: func(r *stageRequest) { r.vol.RootPath = "/volumes/g/s/v" }, options: []string{"a", "b"}, want: "it holds"},
		{name: "other fs", mod: func(r *stageRequest) { r.vol.FSName = "x" }, options: []string{"a", "b"}, want: "it holds"},
		{name: "other mounter", mod: func(r *stageRequest) { r.vol.Mounter = "kernel" }, options: []string{"a", "b"}, want: "mounter fuse"},
		{name: "other options", options: []string{"a"}, want: "options"},
		{name: "read-only", mod: func(r *stageRequest) { r.access.readOnly = true }, options: []string{"a", "b"}, want: "read-write"},
		{name: "shallow", mod: func(r *stageRequest) { r.vol.Shallow, r.vol.SnapshotName = true, "s" }, options: []string{"a", "b"}, want: "not a shallow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base
			if tt.mod != nil {
				tt.mod(&r)
			}
			got := rec.conflict(r, tt.options)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("conflict = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWorkDirIndex(t *testing.T) {
	s, _ := newUnitServer(t, false)
	staging := filepath.Join(t.TempDir(), "s")
	r := &record{VolumeID: "vol/with:odd chars", State: stateStaged, StagingPath: staging, WorkDir: s.workDir("vol/with:odd chars")}
	if filepath.Dir(r.WorkDir) != s.opts.StateDir || len(filepath.Base(r.WorkDir)) != 2*nodestate.WorkDirHashBytes {
		t.Fatalf("work directory %s", r.WorkDir)
	}
	if err := r.write(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(r.WorkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.writeIndex(r); err != nil {
		t.Fatal(err)
	}
	got, err := s.findRecord(r.VolumeID, "")
	if err != nil || got == nil || got.StagingPath != staging {
		t.Fatalf("findRecord = %+v, %v", got, err)
	}
	if got, _ := s.findRecord("other", staging); got != nil {
		t.Fatal("found another volume's record")
	}
}
