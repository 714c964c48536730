package rbd

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/radosop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// paramTopologyPools is ceph-csi's StorageClass key: pools, each serving the nodes whose
// topology has all of its domain segments.
const paramTopologyPools = "topologyConstrainedPools"

// topologyPool is one entry of topologyConstrainedPools, in ceph-csi's JSON shape.
type topologyPool struct {
	PoolName       string          `json:"poolName"`
	DataPool       string          `json:"dataPool,omitempty"`
	DomainSegments []domainSegment `json:"domainSegments"`
}

type domainSegment struct {
	DomainLabel string `json:"domainLabel"`
	Value       string `json:"value"`
}

func parseTopologyPools(s string) ([]topologyPool, error) {
	var pools []topologyPool
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pools); err != nil {
		return nil, controller.InvalidParam(paramTopologyPools, "%v", err)
	}
	if len(pools) == 0 {
		return nil, controller.InvalidParam(paramTopologyPools, "names no pool")
	}
	for i, p := range pools {
		if p.PoolName == "" || len(p.DomainSegments) == 0 {
			return nil, controller.InvalidParam(paramTopologyPools, "entry %d: want poolName and domainSegments", i)
		}
		for _, name := range []string{p.PoolName, p.DataPool} {
			if strings.ContainsAny(name, "/@ \n") {
				return nil, controller.InvalidParam(paramTopologyPools, "entry %d: pool name %q", i, name)
			}
		}
		for _, seg := range p.DomainSegments {
			if seg.DomainLabel == "" || seg.Value == "" {
				return nil, controller.InvalidParam(paramTopologyPools, "entry %d: a domain segment without domainLabel or value", i)
			}
		}
	}
	return pools, nil
}

// TopologyPoolNames lists the pools a topologyConstrainedPools parameter places images in.
func TopologyPoolNames(param string) ([]string, error) {
	pools, err := parseTopologyPools(param)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.PoolName
	}
	return names, nil
}

// TopologyPrefix is the prefix of the driver's topology keys: topology.<driver name>/, as
// ceph-csi's (a domain label "zone" is the key topology.rbd.monoceph.io/zone).
func TopologyPrefix(driverName string) string { return "topology." + driverName + "/" }

// fits reports whether every domain segment of p is in t.
func (p topologyPool) fits(t *csi.Topology, prefix string) bool {
	for _, seg := range p.DomainSegments {
		if v, ok := t.GetSegments()[prefix+seg.DomainLabel]; !ok || v != seg.Value {
			return false
		}
	}
	return true
}

// topology is the volume's accessible topology in p.
func (p topologyPool) topology(prefix string) []*csi.Topology {
	segs := map[string]string{}
	for _, seg := range p.DomainSegments {
		segs[prefix+seg.DomainLabel] = seg.Value
	}
	return []*csi.Topology{{Segments: segs}}
}

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
			if !seen[i] && p.fits(t, prefix) {
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
	return chosen.topology(c.opts.TopologyPrefix), nil
}

// String is how a pool appears in messages.
func (p topologyPool) String() string { return fmt.Sprintf("%s%v", p.PoolName, p.DomainSegments) }
