package sanitytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// RBD runs the suite for the RBD driver in a RADOS namespace of its own, and fails if the run
// leaves an image, a trash entry or a journal key there.
func RBD(t *testing.T, accessType string) {
	cl := cephtest.Env(t)
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	conn, err := p.Get(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	io, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(io.Destroy)
	ns := fmt.Sprintf("sanity-%s-%d", accessType, time.Now().UnixNano()%1e9)
	if err := rbd.NamespaceCreate(io, ns); err != nil {
		t.Fatal(err)
	}
	Run(t, Options{Type: "rbd", AccessType: accessType,
		Parameters:        map[string]string{"pool": cl.RBDPool, "radosNamespace": ns, "mounter": "fuse"},
		MutableParameters: map[string]string{"qosWriteIopsLimit": "5000", "qosWriteIopsBurst": "10000", "qosWriteBpsLimit": "200Mi"},
		Leftovers: func(t *testing.T) []string {
			io.SetNamespace(ns)
			left, err := cephtest.RBDLeftovers(io)
			if err != nil {
				t.Fatal(err)
			}
			if len(left) == 0 {
				_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
				io.SetNamespace("")
				_ = rbd.NamespaceRemove(io, ns)
			}
			return left
		}})
}
