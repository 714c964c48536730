package clustermap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, path, body string, mtime time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestStoreReloadsAndKeepsLastGood(t *testing.T) {
	path := filepath.Join(t.TempDir(), "clusters.json")
	t0 := time.Now().Add(-time.Hour)
	write(t, path, `[{"clusterID":"a","monitors":["m1"]}]`, t0)
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cluster("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cluster("b"); err == nil || !strings.Contains(err.Error(), `clusterID "b"`) {
		t.Fatalf("unknown cluster: %v", err)
	}

	// a valid change is picked up
	write(t, path, `[{"clusterID":"b","monitors":["m2"]}]`, t0.Add(time.Minute))
	s.lastCheck = time.Time{}
	if _, err := s.Cluster("b"); err != nil {
		t.Fatalf("reload missed: %v", err)
	}

	// a broken change is ignored, and reported
	write(t, path, `[{"clusterID":"c"}]`, t0.Add(2*time.Minute))
	s.lastCheck = time.Time{}
	if _, err := s.Cluster("b"); err != nil {
		t.Fatalf("broken file replaced a good map: %v", err)
	}
	if s.LastError() == nil {
		t.Fatal("broken file not reported")
	}

	// a missing file (ConfigMap swap) keeps the map too
	os.Remove(path)
	s.lastCheck = time.Time{}
	if _, err := s.Cluster("b"); err != nil {
		t.Fatal(err)
	}
}

func TestLoadFailsFast(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty.json": ``, "bad.json": `[{"clusterID":""}]`} {
		p := filepath.Join(dir, name)
		write(t, p, body, time.Now())
		if _, err := Load(p); err == nil {
			t.Errorf("Load(%s) succeeded", name)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}
