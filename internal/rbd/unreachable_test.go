package rbd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/oplock"
)

// unreachableController is a controller whose cluster map is clusterMap (JSON), for tests of
// requests refused before they reach Ceph: the maps these tests give name a monitor that does
// not exist (192.0.2.1, TEST-NET-1).
func unreachableController(t *testing.T, clusterMap string) *Controller {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clusters.json")
	if err := os.WriteFile(path, []byte(clusterMap), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := clustermap.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return NewController(Options{Clusters: store, Locks: oplock.New()})
}

// unreachableSecrets are well-formed CSI secrets of a user no cluster knows.
func unreachableSecrets() map[string]string {
	return map[string]string{"userID": "admin", "userKey": "AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="}
}
