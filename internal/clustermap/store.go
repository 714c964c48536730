// Package clustermap keeps the cluster map the driver was started with, and the newer one when
// the file changes (a ConfigMap update), never replacing a good map with a broken one.
package clustermap

import (
	"fmt"
	"os"
	"sync"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"k8s.io/klog/v2"
)

// checkInterval bounds how often the file is stat'ed: lookups happen on every RPC.
const checkInterval = time.Second

// Store serves lookups from the current map.
type Store struct {
	path string

	mu        sync.Mutex
	current   v1.ClusterMap
	modTime   time.Time
	size      int64
	lastCheck time.Time
	lastErr   error
}

// Load reads and validates the file; an invalid file is an error here, at start-up, so a
// misconfigured driver fails fast.
func Load(path string) (*Store, error) {
	s := &Store{path: path}
	fi, m, err := read(path)
	if err != nil {
		return nil, err
	}
	s.current, s.modTime, s.size, s.lastCheck = m, fi.ModTime(), fi.Size(), time.Now()
	return s, nil
}

func read(path string) (os.FileInfo, v1.ClusterMap, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster map: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster map: %w", err)
	}
	m, err := v1.ParseClusterMap(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return fi, m, nil
}

// Map returns the current map, reloading the file if it changed since the last check.
func (s *Store) Map() v1.ClusterMap {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.lastCheck) >= checkInterval {
		s.refresh()
	}
	return s.current
}

// refresh must be called with mu held.
func (s *Store) refresh() {
	s.lastCheck = time.Now()
	fi, err := os.Stat(s.path)
	if err != nil || (fi.ModTime().Equal(s.modTime) && fi.Size() == s.size) {
		return // keep serving the last good map while the file is briefly absent (ConfigMap swap)
	}
	fi, m, err := read(s.path)
	if err != nil {
		if s.lastErr == nil || s.lastErr.Error() != err.Error() {
			klog.ErrorS(err, "Ignoring invalid cluster map, still using the previous one", "path", s.path)
		}
		s.lastErr = err
		return
	}
	s.current, s.modTime, s.size, s.lastErr = m, fi.ModTime(), fi.Size(), nil
	klog.InfoS("Cluster map reloaded", "path", s.path, "clusters", len(m))
}

// Cluster looks a cluster up by ID.
func (s *Store) Cluster(clusterID string) (v1.Cluster, error) {
	if c, ok := s.Map().Lookup(clusterID); ok {
		return c, nil
	}
	return v1.Cluster{}, fmt.Errorf("clusterID %q is not in the cluster map %s", clusterID, s.path)
}

// RBDCluster looks a cluster up by the cluster ID of an existing RBD volume or snapshot ID,
// which may name a mirror peer of it (v1.ClusterMap.LookupRBD).
func (s *Store) RBDCluster(clusterID string) (v1.Cluster, error) {
	if c, ok := s.Map().LookupRBD(clusterID); ok {
		return c, nil
	}
	return v1.Cluster{}, fmt.Errorf("clusterID %q is not in the cluster map %s, nor a mirror peer of a cluster there", clusterID, s.path)
}

// LastError is the reason the newest version of the file was rejected, or nil.
func (s *Store) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}
