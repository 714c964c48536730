package nodestate

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type testRecord struct {
	Version     int      `json:"version"`
	VolumeID    string   `json:"volumeID"`
	StagingPath string   `json:"stagingPath"`
	Flags       []string `json:"flags,omitempty"`
}

func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	staging := filepath.Join(dir, "globalmount")
	if r, err := ReadRecord[testRecord](staging, 1); r != nil || err != nil {
		t.Fatalf("record before it is written = %v, %v", r, err)
	}
	rec := &testRecord{Version: 1, VolumeID: "vol/with:odd chars", StagingPath: staging, Flags: []string{"noatime"}}
	for range 2 { // a second write replaces the first
		if err := WriteRecord(staging, rec); err != nil {
			t.Fatal(err)
		}
	}
	if RecordPath(staging+"/") != filepath.Join(dir, "globalmount.monoceph.json") {
		t.Fatalf("RecordPath = %s", RecordPath(staging+"/"))
	}
	fi, err := os.Stat(RecordPath(staging))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record file: %v, %v", fi, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "globalmount.monoceph.json" {
		t.Fatalf("directory holds %v, want only the record (no temporary files)", entries)
	}
	got, err := ReadRecord[testRecord](staging+"/", 1) // paths are cleaned
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, rec)
	}
	if err := RemoveRecord(staging); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadRecord[testRecord](staging, 1); r != nil || err != nil {
		t.Fatalf("after remove: %v, %v", r, err)
	}
	if err := RemoveRecord(staging); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestReadRecordRejectsGarbage(t *testing.T) {
	staging := filepath.Join(t.TempDir(), "s")
	for content, want := range map[string]string{
		"{":                     "staging record",
		`{"version": 99}`:       "version 99, want 1",
		`{"volumeID": 3}`:       "staging record",
		`{"version": "one"}`:    "staging record",
		`{"volumeID": "v"}`:     "version 0, want 1",
		`{"version": 1, "x":1}`: "",
	} {
		if err := os.WriteFile(RecordPath(staging), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ReadRecord[testRecord](staging, 1)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ReadRecord(%q) = %v, want %q", content, err, want)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "recovery.key")
	for _, data := range []string{"first", "second"} {
		if err := WriteFileAtomic(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != data {
			t.Fatalf("file holds %q, %v; want %q", b, err, data)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".*tmp*")); len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
	if err := WriteFileAtomic(filepath.Join(p+".d", "x"), nil, 0o600); err == nil {
		t.Fatal("writing into a missing directory succeeded")
	}
}

func TestWorkDirIndex(t *testing.T) {
	state := t.TempDir()
	w := WorkDir(state, "vol/with:odd chars")
	if filepath.Dir(w) != state || len(filepath.Base(w)) != 2*WorkDirHashBytes || w == WorkDir(state, "other") {
		t.Fatalf("work directory %s", w)
	}
	if err := os.MkdirAll(w, 0o700); err != nil {
		t.Fatal(err)
	}
	if p, ok, err := IndexedStagingPath(w); p != "" || ok || err != nil {
		t.Fatalf("index before it is written = %q, %v, %v", p, ok, err)
	}
	staging := filepath.Join(t.TempDir(), "s")
	for range 2 { // idempotent
		if err := WriteIndex(w, staging); err != nil {
			t.Fatal(err)
		}
	}
	if p, ok, err := IndexedStagingPath(w); p != staging || !ok || err != nil {
		t.Fatalf("IndexedStagingPath = %q, %v, %v; want %s", p, ok, err, staging)
	}
	other := filepath.Join(t.TempDir(), "o")
	if err := WriteIndex(w, other); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := IndexedStagingPath(w); p != other {
		t.Fatalf("index after a move = %q, want %s", p, other)
	}
	if err := os.Remove(filepath.Join(w, "record")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(w, "record")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := IndexedStagingPath(w); err == nil || !strings.Contains(err.Error(), "not a staging record") {
		t.Fatalf("index to another file: %v", err)
	}
	for range 2 {
		if err := RemoveIndex(w); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(w); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestMakeStateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "state")
	if err := MakeStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := MakeStateDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state directory: %v, %v; want mode 0700", fi, err)
	}
	if err := MakeStateDir(filepath.Join(dir, "x\x00")); err == nil {
		t.Fatal("a bad path succeeded")
	}
}
