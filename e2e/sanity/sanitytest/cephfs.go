package sanitytest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// CephFS runs the suite for the CephFS driver in a subvolume group and journal namespace of its
// own, and fails if the run leaves a subvolume, a snapshot, a journal key or a reference tracker.
func CephFS(t *testing.T) { runCephFS(t, Options{}) }

// CephCSICephFS runs the suite under ceph-csi's CephFS driver name with the parameters of
// ceph-csi's example StorageClass (FUSE mounter) and ceph-csi's CephFS Secret keys
// (adminID/adminKey).
func CephCSICephFS(t *testing.T) {
	cl := cephtest.Env(t)
	runCephFS(t, Options{DriverName: "cephfs.csi.ceph.com",
		Secrets: map[string]string{"adminID": cl.Admin.ID, "adminKey": cl.Admin.Key()}})
}

func runCephFS(t *testing.T, o Options) {
	cl := cephtest.Env(t)
	tag := fmt.Sprintf("sanity-%d", time.Now().UnixNano()%1e9)
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	mgr, err := p.GetForMgr(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Release)
	fsa := admin.NewFromConn(mgr.Rados())
	o.Type, o.AccessType = "cephfs", "mount"
	o.Parameters = map[string]string{"fsName": cl.FSName, "mounter": "fuse"}
	o.MutableParameters = map[string]string{"pinExport": "0", "pinRandom": "0.005"}
	o.ClusterMap = fmt.Sprintf(`"cephFS":{"subvolumeGroup":%q,"radosNamespace":%q}`, tag, tag)
	o.Leftovers = func(t *testing.T) []string {
		var left []string
		subs := cephtest.Settled(func() []string { s, _ := fsa.ListSubVolumes(cl.FSName, tag); return s })
		for _, s := range subs {
			left = append(left, "subvolume "+s)
		}
		io, err := mgr.Rados().OpenIOContext("cephfs." + cl.FSName + ".meta")
		if err != nil {
			return append(left, err.Error())
		}
		defer io.Destroy()
		io.SetNamespace(tag)
		_ = io.ListObjects(func(oid string) {
			vals, _ := io.GetAllOmapValues(oid, "", "", 1000)
			if strings.HasPrefix(oid, "monoceph.reftracker.") || strings.HasPrefix(oid, "rt-backingsnapshot-") || len(vals) > 0 {
				left = append(left, fmt.Sprintf("%s: %d keys", oid, len(vals)))
			}
		})
		if len(left) == 0 {
			_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
			_ = fsa.RemoveSubVolumeGroup(cl.FSName, tag)
		}
		return left
	}
	Run(t, o)
}
