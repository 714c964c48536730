package nodefence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	v1 "github.com/monoceph/monoceph/api/v1"
)

// The state ConfigMap is an ordinary object in the release namespace: anyone who may edit
// ConfigMaps there can change what the fencer unfences (remove any blocklist entry) or fences
// next (any range). So a record is validated before it is acted on, and one that is not what
// this fencer writes is refused and reported, never acted on.

// InvalidRecordError is a record of the state ConfigMap that does not validate.
type InvalidRecordError struct {
	ConfigMap, Node string
	Err             error
}

func (e *InvalidRecordError) Error() string {
	return fmt.Sprintf("fencing state ConfigMap %s, key %s: %v", e.ConfigMap, e.Node, e.Err)
}

func (e *InvalidRecordError) Unwrap() error { return e.Err }

// decodeRecord reads and validates one record: strict JSON of this version's fields only.
func decodeRecord(raw string) (*Record, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	var r Record
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the record")
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// validate checks what the fencer writes: cluster IDs of the map's shape, and per cluster
// single addresses (the fencer never records a range), each once, with the pre-existing ones
// among them.
func (r *Record) validate() error {
	if r.Clusters == nil {
		r.Clusters = map[string]*ClusterRecord{}
	}
	for id, cr := range r.Clusters {
		if !v1.ValidClusterID(id) {
			return fmt.Errorf("cluster ID %q is malformed", id)
		}
		if cr == nil {
			return fmt.Errorf("cluster %s: no record", id)
		}
		if err := cr.validate(); err != nil {
			return fmt.Errorf("cluster %s: %w", id, err)
		}
	}
	return nil
}

func (c *ClusterRecord) validate() error {
	for i, p := range c.CIDRs {
		if err := singleAddr(p); err != nil {
			return err
		}
		if slices.Contains(c.CIDRs[:i], p) {
			return fmt.Errorf("%s recorded twice", p)
		}
	}
	for _, p := range c.Preexisting {
		if !slices.Contains(c.CIDRs, p) {
			return fmt.Errorf("pre-existing %s is not among the recorded CIDRs", p)
		}
	}
	return nil
}

// singleAddr accepts the prefix of one usable unicast address.
func singleAddr(p netip.Prefix) error {
	a := p.Addr()
	switch {
	case !p.IsValid():
		return errors.New("an invalid CIDR")
	case p.Bits() != a.BitLen():
		return fmt.Errorf("%s is a range, the fencer records single addresses", p)
	case a.Is4In6():
		return fmt.Errorf("%s is an IPv4-mapped address, the fencer records IPv4 addresses as such", p)
	case a.IsUnspecified() || a.IsMulticast():
		return fmt.Errorf("%s is not a client address", p)
	}
	return nil
}
