package node

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/oplock"
)

// newTestServer serves a cluster map of one cluster and keeps its state in a temporary
// directory; x nil means the host executor.
func newTestServer(t *testing.T, m v1.ClusterMap, x hostexec.Executor) *Server {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "clusters.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := clustermap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	opts := Options{NodeID: "node-1", StateDir: filepath.Join(dir, "state"), Clusters: store, Locks: oplock.New(), Timeout: time.Minute, Pool: pool}
	if x == nil {
		x = hostexec.New(opts.Timeout)
	}
	s, err := newServer(opts, x, x)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var localMap = v1.ClusterMap{{ClusterID: "local", Monitors: []string{"127.0.0.1:6789"}}}

func TestNewChecksOptions(t *testing.T) {
	store := newTestServer(t, localMap, nil).opts.Clusters
	ok := Options{NodeID: "n", StateDir: t.TempDir() + "/s", Clusters: store, Locks: oplock.New()}
	tests := []struct {
		name string
		edit func(*Options)
	}{
		{"node ID", func(o *Options) { o.NodeID = "" }},
		{"state dir", func(o *Options) { o.StateDir = "" }},
		{"clusters", func(o *Options) { o.Clusters = nil }},
		{"locks", func(o *Options) { o.Locks = nil }},
	}
	for _, tt := range tests {
		o := ok
		tt.edit(&o)
		if _, err := New(o); err == nil {
			t.Errorf("New without %s succeeded", tt.name)
		}
	}
	s, err := New(ok)
	if err != nil {
		t.Fatal(err)
	}
	if s.opts.Timeout != DefaultTimeout || s.opts.FilesystemTimeout != DefaultFilesystemTimeout {
		t.Fatalf("timeouts = %v, %v; want the defaults", s.opts.Timeout, s.opts.FilesystemTimeout)
	}
	fi, err := os.Stat(ok.StateDir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v, want mode 0700", fi.Mode(), err)
	}
}
