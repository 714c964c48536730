package rbd

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testPrefix = "topology.rbd.monoceph.io/"

func zone(z string) *csi.Topology {
	return &csi.Topology{Segments: map[string]string{testPrefix + "zone": z}}
}

func TestCandidatePools(t *testing.T) {
	pools, err := parseTopologyPools(`[{"poolName":"p1","domainSegments":[{"domainLabel":"zone","value":"z1"}]},
		{"poolName":"p2","dataPool":"d2","domainSegments":[{"domainLabel":"zone","value":"z2"}]},
		{"poolName":"p2r","domainSegments":[{"domainLabel":"zone","value":"z2"},{"domainLabel":"rack","value":"r1"}]}]`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  *csi.TopologyRequirement
		want string // pool names, or the error code
	}{
		{"none", nil, ""},
		{"requisite", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("z2")}}, "p2"},
		{"preferred first", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("z1"), zone("z2")},
			Preferred: []*csi.Topology{zone("z2"), zone("z1")}}, "p2 p1"},
		{"all segments", &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{
			testPrefix + "zone": "z2", testPrefix + "rack": "r1"}}}}, "p2 p2r"},
		{"other prefix", &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: map[string]string{"topology.other/zone": "z1"}}}}, "ResourceExhausted"},
		{"unserved", &csi.TopologyRequirement{Requisite: []*csi.Topology{zone("z3")}}, "ResourceExhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := candidatePools(pools, tc.req, testPrefix)
			if err != nil {
				if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || tc.want != "ResourceExhausted" {
					t.Fatalf("error %v, want %s", err, tc.want)
				} else if !strings.Contains(err.Error(), "zone=") {
					t.Errorf("error %q does not name the segments", err)
				}
				return
			}
			var names []string
			for _, p := range got {
				names = append(names, p.PoolName)
			}
			if strings.Join(names, " ") != tc.want {
				t.Errorf("pools %v, want %s", names, tc.want)
			}
		})
	}
}
