// Package cephtest gives integration tests the local Ceph cluster started by
// scripts/ceph-local.sh: its monitors and admin credentials, read from the environment that
// `scripts/ceph-local.sh start` prints.
//
// Tests that need the cluster call Env. When MONOCEPH_INTEGRATION=1 (make test sets it) a
// missing or unreachable cluster fails the test; otherwise the test is skipped with a message
// saying how to run it, so a plain `go test ./...` stays usable without Ceph.
package cephtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
)

// Cluster is the local test cluster.
type Cluster struct {
	ID       string
	Monitors string
	Admin    ceph.Credentials
	FSName   string
	RBDPool  string
}

// Required reports whether integration tests must run (and so fail instead of skipping).
func Required() bool { return os.Getenv("MONOCEPH_INTEGRATION") == "1" }

// Env returns the local cluster or skips/fails the test as described in the package comment.
func Env(t testing.TB) Cluster {
	t.Helper()
	mons, id, key := os.Getenv("CEPH_MONITORS"), os.Getenv("CEPH_ADMIN_ID"), os.Getenv("CEPH_ADMIN_KEY")
	if mons == "" || key == "" {
		if Required() {
			t.Fatal("MONOCEPH_INTEGRATION=1 but CEPH_MONITORS/CEPH_ADMIN_KEY are unset: source the output of scripts/ceph-local.sh start")
		}
		t.Skip("no local Ceph cluster: run `eval \"$(scripts/ceph-local.sh start)\"` (or make test) to run integration tests")
	}
	if id == "" {
		id = "admin"
	}
	cred, err := ceph.NewCredentials(id, key)
	if err != nil {
		t.Fatalf("CEPH_ADMIN_KEY: %v", err)
	}
	c := Cluster{
		ID:       envOr("MONOCEPH_CLUSTER_ID", "local"),
		Monitors: mons,
		Admin:    cred,
		FSName:   envOr("CEPH_FS_NAME", "myfs"),
		RBDPool:  envOr("CEPH_RBD_POOL", "rbd"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	eps, err := v1.MonitorEndpoints(mons)
	if err == nil {
		err = ceph.ProbeMonitor(ctx, eps[0])
	}
	if err != nil {
		t.Fatalf("local Ceph cluster at %s does not answer (is scripts/ceph-local.sh start running?): %v", mons, err)
	}
	return c
}

// ClusterMap is a one-entry cluster map for the local cluster.
func (c Cluster) ClusterMap() v1.ClusterMap {
	return v1.ClusterMap{{ClusterID: c.ID, Monitors: []string{c.Monitors}}}
}

// ClusterMapFile writes a one-entry cluster map for the local cluster into dir and returns its
// path; extra holds more JSON fields of the entry (e.g. `"cephFS":{"subvolumeGroup":"g"}`).
func (c Cluster) ClusterMapFile(t testing.TB, dir, extra string) string {
	t.Helper()
	if extra != "" {
		extra = "," + extra
	}
	p := filepath.Join(dir, "clusters.json")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(`[{"clusterID":%q,"monitors":[%q]%s}]`, c.ID, c.Monitors, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Clusters is that map (in a temporary directory) loaded as the driver's services read it.
func (c Cluster) Clusters(t testing.TB, extra string) *clustermap.Store {
	t.Helper()
	s, err := clustermap.Load(c.ClusterMapFile(t, t.TempDir(), extra))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Secrets are the CSI secrets an RPC against the local cluster carries.
func (c Cluster) Secrets() map[string]string {
	return map[string]string{ceph.SecretUserID: c.Admin.ID, ceph.SecretUserKey: c.Admin.Key()}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// ReadableKey adds to an "auth get-or-create" monitor command the key type this process's
// librados can read. Tentacle 20.2.4's monitors make aes256k keys by default (CVE-2025-30156),
// which Pacific's and Reef's libraries cannot read: monoceph refuses such a user as
// UNAUTHENTICATED, rightly, so a test that makes a user to connect as asks for an aes key where
// its libraries need one (the local clusters allow aes; older monitors ignore key_type).
func ReadableKey(cmd map[string]any) map[string]any {
	if !ceph.ReadsAES256KKeys() {
		cmd["key_type"] = "aes"
	}
	return cmd
}
