// Package localdriver starts a monoceph driver in-process, in all-in-one mode on a temporary
// socket, against the local Ceph cluster: what end-to-end tests and the sanity suites talk to.
package localdriver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/driver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Driver is a running driver.
type Driver struct {
	Cluster cephtest.Cluster
	Socket  string
	Dir     string // a private temporary directory, removed afterwards
	Conn    *grpc.ClientConn
}

// Start runs a driver of type typ; clusterMapExtra is appended to the cluster map entry's fields
// (e.g. `"cephFS":{"subvolumeGroup":"g"}`).
func Start(t testing.TB, typ driver.Type, clusterMapExtra string) *Driver {
	t.Helper()
	return StartNamed(t, typ, "", clusterMapExtra)
}

// StartNamed is Start under a driver name of the caller's ("" is the default for typ), e.g.
// ceph-csi's; each of more changes the configuration before the driver starts.
func StartNamed(t testing.TB, typ driver.Type, name, clusterMapExtra string, more ...func(*driver.Config)) *Driver {
	t.Helper()
	cl := cephtest.Env(t)
	// short: FUSE admin sockets live under the state directory and paths are limited to 107 bytes
	dir, err := os.MkdirTemp("", "md-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	clusters := cl.ClusterMapFile(t, dir, clusterMapExtra)
	cfg := driver.Config{
		Type: typ, Mode: driver.ModeAll, Endpoint: "unix://" + filepath.Join(dir, "csi.sock"), NodeID: "e2e-node", DriverName: name,
		ClusterConfig: clusters, StateDir: filepath.Join(dir, "st"), RBDMaxCloneDepth: 8,
		// csi-sanity never retries ABORTED, which CreateVolume answers for a CephFS clone
		// still copying after the wait; on Pacific an empty clone has taken up to 10 s.
		CephFSCloneWait: 2 * time.Minute,
		CephTimeouts:    ceph.Timeouts{Connect: 10 * time.Second, Op: 30 * time.Second},
		ConnIdleTTL:     time.Minute, HealthTimeout: 5 * time.Second, ShutdownGrace: 5 * time.Second,
	}
	for _, f := range more {
		f(&cfg)
	}
	d, err := driver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	conn, err := grpc.NewClient("unix://"+d.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("driver: %v", err)
		}
	})
	return &Driver{Cluster: cl, Socket: d.SocketPath(), Dir: dir, Conn: conn}
}
