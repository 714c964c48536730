package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

const (
	rbdPool  = "rbd"
	fsName   = "myfs"
	metaPool = "cephfs.myfs.meta"
	fsGroup  = "csi"
)

// inspector looks at the suite's cluster directly, as an administrator would.
type inspector struct {
	c    *cluster
	conn *ceph.Conn
}

func newInspector(t *testing.T, c *cluster) *inspector {
	t.Helper()
	cred, err := ceph.NewCredentials("admin", c.env["CEPH_ADMIN_KEY"])
	if err != nil {
		t.Fatal(err)
	}
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := p.Get(ctx, c.env["CEPH_MONITORS"], cred)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return &inspector{c: c, conn: conn}
}

func (in *inspector) io(t *testing.T, pool, ns string) *rados.IOContext {
	t.Helper()
	io, err := in.conn.Rados().OpenIOContext(pool)
	if err != nil {
		t.Fatal(err)
	}
	io.SetNamespace(ns)
	return io
}

// objects lists pool's objects in every namespace but the default one ("ns/oid"), with their
// omap keys ("ns/oid/key"): the driver's journals and trackers in the CephFS metadata pool,
// and anything a request wrote into a namespace it named.
func (in *inspector) objects(t *testing.T, pool string, withDefault bool) []string {
	t.Helper()
	io := in.io(t, pool, rados.AllNamespaces)
	defer io.Destroy()
	iter, err := io.Iter()
	if err != nil {
		t.Fatal(err)
	}
	defer iter.Close()
	type obj struct{ ns, oid string }
	var objs []obj
	for iter.Next() {
		if iter.Namespace() != "" || withDefault {
			objs = append(objs, obj{iter.Namespace(), iter.Value()})
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.ns+"/"+o.oid)
		nio := in.io(t, pool, o.ns)
		vals, _ := nio.GetAllOmapValues(o.oid, "", "", 100000)
		nio.Destroy()
		for k := range vals {
			out = append(out, o.ns+"/"+o.oid+"/"+k)
		}
	}
	sort.Strings(out)
	return out
}

// journalState is everything a garbage request could have changed: every object and omap key
// of the RBD pool, and of the CephFS metadata pool outside the MDS's own namespace.
func (in *inspector) journalState(t *testing.T) []string {
	t.Helper()
	out := in.objects(t, rbdPool, true)
	for _, o := range in.objects(t, metaPool, false) {
		out = append(out, metaPool+":"+o)
	}
	return out
}

// leftovers lists what the driver left on the cluster: RBD images, stubs, trash entries
// (also of removals in progress), journal keys and objects; CephFS subvolumes (also with
// retained snapshots) and journal or tracker objects.
func (in *inspector) leftovers(t *testing.T) []string {
	t.Helper()
	io := in.io(t, rbdPool, "")
	defer io.Destroy()
	left, err := cephtest.RBDLeftovers(io)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range in.objects(t, rbdPool, false) {
		left = append(left, "rbd namespace object "+o)
	}
	left = append(left, cephtest.Settled(func() []string {
		var subs []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(in.c.cli(t, "ceph", "fs", "subvolume", "ls", fsName, fsGroup, "-f", "json"), &subs); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range subs {
			names = append(names, "subvolume "+s.Name)
		}
		return names
	})...)
	for _, o := range in.objects(t, metaPool, false) {
		left = append(left, fmt.Sprintf("%s object %s", metaPool, o))
	}
	return left
}
