//go:build vault || keyrotation

package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/oplock"
	rbdctl "github.com/monoceph/monoceph/internal/rbd"
)

// withKMS gives the node server of r the KMS configuration cfgJSON and returns a controller
// with the same configuration (to create encrypted volumes) and a RADOS namespace of the test's
// own, named prefix and a time stamp, with an IO context in it. The namespace's snapshots,
// images and objects, and the namespace, go at the test's end.
func (r *rig) withKMS(t *testing.T, cfgJSON, prefix string) (*rbdctl.Controller, *rados.IOContext, string) {
	t.Helper()
	cfg, err := kms.Parse([]byte(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	r.s.opts.KMS = cfg
	ctrl := rbdctl.NewController(rbdctl.Options{Clusters: r.cl.Clusters(t, ""), Pool: r.s.opts.Pool, Locks: oplock.New(), KMS: cfg})
	io, err := r.conn.Rados().OpenIOContext(r.cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1e12)
	if err := rbd.NamespaceCreate(io, ns); err != nil {
		t.Fatal(err)
	}
	io.SetNamespace(ns)
	t.Cleanup(func() {
		names, _ := rbd.GetImageNames(io)
		for _, n := range names {
			if img, err := rbd.OpenImage(io, n, rbd.NoSnapshot); err == nil {
				snaps, _ := img.GetSnapshotNames()
				for _, s := range snaps {
					_ = img.GetSnapshot(s.Name).Remove()
				}
				img.Close()
			}
			_ = rbd.RemoveImage(io, n)
		}
		_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
		io.SetNamespace("")
		_ = rbd.NamespaceRemove(io, ns)
		io.Destroy()
	})
	return ctrl, io, ns
}
