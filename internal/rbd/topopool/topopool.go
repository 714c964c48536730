// Package topopool parses ceph-csi's topologyConstrainedPools StorageClass parameter: the
// pools an RBD class places images in, each serving the nodes whose topology has all of its
// domain segments. The controller places volumes by it and the inventory lists its pools.
package topopool

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/classparam"
)

// Param is ceph-csi's StorageClass key.
const Param = "topologyConstrainedPools"

// Pool is one entry of topologyConstrainedPools, in ceph-csi's JSON shape.
type Pool struct {
	PoolName       string          `json:"poolName"`
	DataPool       string          `json:"dataPool,omitempty"`
	DomainSegments []DomainSegment `json:"domainSegments"`
}

// DomainSegment is one topology key (without the driver's prefix) and its value.
type DomainSegment struct {
	DomainLabel string `json:"domainLabel"`
	Value       string `json:"value"`
}

// Parse parses and checks the parameter's value; a bad one is INVALID_ARGUMENT naming Param.
func Parse(s string) ([]Pool, error) {
	var pools []Pool
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pools); err != nil {
		return nil, classparam.InvalidParam(Param, "%v", err)
	}
	if len(pools) == 0 {
		return nil, classparam.InvalidParam(Param, "names no pool")
	}
	for i, p := range pools {
		if p.PoolName == "" || len(p.DomainSegments) == 0 {
			return nil, classparam.InvalidParam(Param, "entry %d: want poolName and domainSegments", i)
		}
		for _, name := range []string{p.PoolName, p.DataPool} {
			if strings.ContainsAny(name, "/@ \n") {
				return nil, classparam.InvalidParam(Param, "entry %d: pool name %q", i, name)
			}
		}
		for _, seg := range p.DomainSegments {
			if seg.DomainLabel == "" || seg.Value == "" {
				return nil, classparam.InvalidParam(Param, "entry %d: a domain segment without domainLabel or value", i)
			}
		}
	}
	return pools, nil
}

// Names lists the pools a topologyConstrainedPools parameter places images in.
func Names(param string) ([]string, error) {
	pools, err := Parse(param)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.PoolName
	}
	return names, nil
}

// Fits reports whether every domain segment of p is in t, whose keys have prefix.
func (p Pool) Fits(t *csi.Topology, prefix string) bool {
	for _, seg := range p.DomainSegments {
		if v, ok := t.GetSegments()[prefix+seg.DomainLabel]; !ok || v != seg.Value {
			return false
		}
	}
	return true
}

// Topology is the accessible topology of a volume in p.
func (p Pool) Topology(prefix string) []*csi.Topology {
	segs := map[string]string{}
	for _, seg := range p.DomainSegments {
		segs[prefix+seg.DomainLabel] = seg.Value
	}
	return []*csi.Topology{{Segments: segs}}
}

// String is how a pool appears in messages.
func (p Pool) String() string { return fmt.Sprintf("%s%v", p.PoolName, p.DomainSegments) }
