package rbd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/volid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestZonesTopologyPools creates volumes of a class with a pool per zone (scripts/ceph-zones.sh:
// <pool>-z1 on zone z1's OSD, <pool>-z2 on z2's): a requirement for z2 puts the image in the
// z2 pool and answers z2 as its topology, a retry with other preferences finds it there, and
// a zone no pool serves is RESOURCE_EXHAUSTED.
func TestZonesTopologyPools(t *testing.T) {
	cl := cephtest.Env(t)
	base := os.Getenv("CEPH_ZONES_POOL")
	if base == "" {
		t.Skip("needs the two-zone cluster of scripts/ceph-zones.sh (make test-zones)")
	}
	prefix := TopologyPrefix("rbd.monoceph.io")
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	ctrl := NewController(Options{Clusters: cl.Clusters(t, ""), Pool: pool, Locks: oplock.New(), TopologyPrefix: prefix})
	g, err := server.NewGRPC("unix://"+filepath.Join(t.TempDir(), "csi.sock"), server.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	csi.RegisterControllerServer(g.Server, ctrl)
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { g.Shutdown(5 * time.Second) })
	cc, err := grpc.NewClient("unix://"+g.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	client := csi.NewControllerClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	zoneTopo := func(z string) *csi.Topology { return &csi.Topology{Segments: map[string]string{prefix + "zone": z}} }
	params := map[string]string{"clusterID": cl.ID, "topologyConstrainedPools": fmt.Sprintf(
		`[{"poolName":"%s-z1","domainSegments":[{"domainLabel":"zone","value":"z1"}]},{"poolName":"%s-z2","domainSegments":[{"domainLabel":"zone","value":"z2"}]}]`, base, base)}
	req := func(name string, tr *csi.TopologyRequirement) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}, VolumeCapabilities: mountCap,
			Parameters: params, Secrets: cl.Secrets(), AccessibilityRequirements: tr}
	}
	name := fmt.Sprintf("topo-%d", time.Now().UnixNano())
	resp, err := client.CreateVolume(ctx, req(name, &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneTopo("z2")}, Preferred: []*csi.Topology{zoneTopo("z2")}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := client.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: resp.GetVolume().GetVolumeId(), Secrets: cl.Secrets()}); err != nil {
			t.Error(err)
		}
	})
	vol := resp.GetVolume()
	if got := vol.GetAccessibleTopology(); len(got) != 1 || got[0].GetSegments()[prefix+"zone"] != "z2" {
		t.Errorf("accessible topology %v, want zone z2", got)
	}
	if vol.GetVolumeContext()["pool"] != base+"-z2" {
		t.Errorf("volume context pool %q, want %s-z2", vol.GetVolumeContext()["pool"], base)
	}
	id, err := volid.ParseRBDVolume(vol.GetVolumeId())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	z2ID, err := conn.Rados().GetPoolByName(base + "-z2")
	if err != nil || id.PoolID != z2ID {
		t.Errorf("volume ID's pool %d, want %s-z2's %d (%v)", id.PoolID, base, z2ID, err)
	}
	io, err := conn.Rados().OpenIOContext(base + "-z2")
	if err != nil {
		t.Fatal(err)
	}
	defer io.Destroy()
	if names, err := rbd.GetImageNames(io); err != nil || len(names) != 1 {
		t.Errorf("images in %s-z2: %v (%v), want the volume's", base, names, err)
	}

	// a retry that prefers z1 but allows z2 finds the volume where it is
	again, err := client.CreateVolume(ctx, req(name, &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneTopo("z1"), zoneTopo("z2")},
		Preferred: []*csi.Topology{zoneTopo("z1")}}))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetVolume().GetVolumeId() != vol.GetVolumeId() {
		t.Errorf("retry answered %s, want %s", again.GetVolume().GetVolumeId(), vol.GetVolumeId())
	}

	_, err = client.CreateVolume(ctx, req(name+"-z3", &csi.TopologyRequirement{Requisite: []*csi.Topology{zoneTopo("z3")}}))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("zone z3: %v, want RESOURCE_EXHAUSTED", err)
	}
	t.Logf("z3: %v", err)
}
