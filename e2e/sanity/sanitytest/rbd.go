package sanitytest

import (
	"context"
	"fmt"
	"strings"
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
		Parameters: map[string]string{"pool": cl.RBDPool, "radosNamespace": ns, "mounter": "fuse"},
		Leftovers: func(t *testing.T) []string {
			io.SetNamespace(ns)
			var left []string
			names, _ := rbd.GetImageNames(io)
			for _, n := range names {
				left = append(left, "image "+n)
			}
			trash, _ := rbd.GetTrashList(io)
			for _, e := range trash {
				left = append(left, "trash "+e.Name)
			}
			_ = io.ListObjects(func(oid string) {
				if strings.HasPrefix(oid, "monoceph.") {
					if vals, _ := io.GetAllOmapValues(oid, "", "", 1000); len(vals) > 0 {
						left = append(left, fmt.Sprintf("%s: %d keys", oid, len(vals)))
					}
				}
			})
			if len(left) == 0 {
				_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
				io.SetNamespace("")
				_ = rbd.NamespaceRemove(io, ns)
			}
			return left
		}})
}
