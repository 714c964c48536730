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
func CephFS(t *testing.T) {
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
	Run(t, Options{Type: "cephfs", AccessType: "mount",
		Parameters:        map[string]string{"fsName": cl.FSName, "mounter": "fuse"},
		MutableParameters: map[string]string{"pinExport": "0", "pinRandom": "0.005"},
		ClusterMap:        fmt.Sprintf(`"cephFS":{"subvolumeGroup":%q,"radosNamespace":%q}`, tag, tag),
		Leftovers: func(t *testing.T) []string {
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
				if strings.HasPrefix(oid, "monoceph.reftracker.") || len(vals) > 0 {
					left = append(left, fmt.Sprintf("%s: %d keys", oid, len(vals)))
				}
			})
			if len(left) == 0 {
				_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
				_ = fsa.RemoveSubVolumeGroup(cl.FSName, tag)
			}
			return left
		}})
}
