package rbd

import (
	"context"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/topopool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// paramTopologyPools is ceph-csi's StorageClass key: pools, each serving the nodes whose
// topology has all of its domain segments (internal/rbd/topopool).
const paramTopologyPools = topopool.Param

// topologyPool is one entry of topologyConstrainedPools.
type topologyPool = topopool.Pool

func parseTopologyPools(s string) ([]topologyPool, error) { return topopool.Parse(s) }

// TopologyPrefix is the prefix of the driver's topology keys: topology.<driver name>/, as
// ceph-csi's (a domain label "zone" is the key topology.rbd.monoceph.io/zone).
func TopologyPrefix(driverName string) string { return "topology." + driverName + "/" }

// candidatePools lists the pools that fit req, in the order the CSI spec asks for: those of
// the preferred topologies first (in their order), then those of the requisite ones. Nil req
// gives nil. A requirement no pool fits is RESOURCE_EXHAUSTED naming its segments.
func candidatePools(pools []topologyPool, req *csi.TopologyRequirement, prefix string) ([]topologyPool, error) {
	if req == nil || len(req.GetPreferred())+len(req.GetRequisite()) == 0 {
		return nil, nil
	}
	var out []topologyPool
	seen := map[int]bool{}
	for _, t := range append(append([]*csi.Topology{}, req.GetPreferred()...), req.GetRequisite()...) {
		for i, p := range pools {
			if !seen[i] && p.Fits(t, prefix) {
				seen[i] = true
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		var segs []string
		for _, t := range append(append([]*csi.Topology{}, req.GetPreferred()...), req.GetRequisite()...) {
			var kv []string
			for k, v := range t.GetSegments() {
				kv = append(kv, k+"="+v)
			}
			sort.Strings(kv)
			segs = append(segs, "{"+strings.Join(kv, ",")+"}")
		}
		return nil, status.Errorf(codes.ResourceExhausted, "no pool of %s serves the requested topology %s", paramTopologyPools, strings.Join(segs, " "))
	}
	return out, nil
}

// placeByTopology picks the pool of a volume of a class with topologyConstrainedPools and
// sets it in params; it returns the volume's accessible topology. A retry finds a reservation
// made in any fitting pool (the order of fitting pools may differ between calls: the CO may
// send other preferences), else the volume goes to the first fitting pool. Without
// accessibility requirements the class's pool is used, when it names one.
func (c *Controller) placeByTopology(ctx context.Context, conn *ceph.Conn, params *volumeParams, name string, req *csi.TopologyRequirement) ([]*csi.Topology, error) {
	cands, err := candidatePools(params.TopologyPools, req, c.opts.TopologyPrefix)
	if err != nil {
		return nil, err
	}
	if cands == nil {
		if params.Pool == "" {
			return nil, status.Errorf(codes.InvalidArgument, "the class has %s but no pool, and the request no accessibility_requirements", paramTopologyPools)
		}
		return nil, nil
	}
	chosen := cands[0]
	for _, p := range cands {
		rec, err := journal.Lookup(ctx, radosop.Location{Conn: conn, Pool: p.PoolName, Namespace: params.Namespace}, journal.Volume, name)
		if ceph.Is(err, ceph.ErrNotFound) {
			continue // a pool that is gone holds no reservation; checkPlacement names it if chosen
		}
		if err != nil {
			return nil, err
		}
		if rec != nil {
			chosen = p
			break
		}
	}
	params.Pool = chosen.PoolName
	if chosen.DataPool != "" {
		params.DataPool = chosen.DataPool
	}
	return chosen.Topology(c.opts.TopologyPrefix), nil
}
