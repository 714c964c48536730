package v1

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Cluster is one entry of the cluster map: a Ceph cluster the driver may talk to.
type Cluster struct {
	// ClusterID is the name StorageClasses, VolumeSnapshotClasses and volume IDs refer to.
	ClusterID string `json:"clusterID"`
	// Monitors are the monitor addresses ("host:port", "host" or "[v2:host:3300,v1:host:6789]").
	Monitors []string `json:"monitors"`
	// CephFS holds the defaults for CephFS volumes on this cluster.
	CephFS CephFSDefaults `json:"cephFS,omitempty"`
	// RBD holds the defaults for RBD volumes on this cluster.
	RBD RBDDefaults `json:"rbd,omitempty"`

	// NFS is ceph-csi's key, accepted so that its config.json works as it is, as long as it
	// asks for nothing monoceph lacks (see Validate).
	NFS NFSOptions `json:"nfs,omitempty"`
	// ReadAffinity makes RBD volumes read from the OSDs nearest to the node (ceph-csi's key).
	ReadAffinity ReadAffinity `json:"readAffinity,omitempty"`

	// MirrorOf is set by LookupRBD when the entry was found through the cluster ID of one of its
	// RBD mirror peers: RBDPoolID then maps that peer's pool IDs.
	MirrorOf string `json:"-"`
}

// NFSOptions are ceph-csi's NFS options; monoceph has no NFS driver.
type NFSOptions struct {
	NetNamespaceFilePath string `json:"netNamespaceFilePath,omitempty"`
}

// ReadAffinity is ceph-csi's read affinity: reads from the OSD nearest to the node, by the
// CRUSH location its labels give (see CrushLocation). monoceph's RBD FUSE server gives that
// location to librbd (rbd_read_from_replica_policy=localize) where the cluster allows it.
type ReadAffinity struct {
	Enabled bool `json:"enabled,omitempty"`
	// CrushLocationLabels are the node labels that name the node's CRUSH buckets: a label's
	// name after its last "/" is the bucket type, its value the bucket
	// (topology.kubernetes.io/zone=z1 is zone z1).
	CrushLocationLabels []string `json:"crushLocationLabels,omitempty"`
}

// CrushLocation is the CRUSH location a node with labels has, in librados' crush_location
// form ("host=n1 zone=z1", sorted by bucket type so that equal locations are equal strings),
// or "" when read affinity is off or none of the labels is on the node. Values that CRUSH
// could not take as a bucket name (anything but [A-Za-z0-9._-]) are left out.
func (r ReadAffinity) CrushLocation(labels map[string]string) string {
	if !r.Enabled {
		return ""
	}
	var parts []string
	seen := map[string]bool{}
	for _, l := range r.CrushLocationLabels {
		v, ok := labels[l]
		typ := l[strings.LastIndex(l, "/")+1:]
		if !ok || typ == "" || seen[typ] || !crushNamePattern.MatchString(typ) || !crushNamePattern.MatchString(v) {
			continue
		}
		seen[typ] = true
		parts = append(parts, typ+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// crushNamePattern: CRUSH bucket types and names (CrushWrapper::is_valid_crush_name)
var crushNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// CephFSDefaults are per-cluster defaults for CephFS volumes.
type CephFSDefaults struct {
	// SubvolumeGroup is the group subvolumes are created in when a StorageClass names none.
	SubvolumeGroup string `json:"subvolumeGroup,omitempty"`
	// RadosNamespace is the namespace of the metadata pool that holds the driver's own objects
	// (journal, reference trackers).
	RadosNamespace string `json:"radosNamespace,omitempty"`
	// KernelMountOptions and FuseMountOptions are mount options of volumes whose StorageClass
	// names none (ceph-csi's keys).
	KernelMountOptions string `json:"kernelMountOptions,omitempty"`
	FuseMountOptions   string `json:"fuseMountOptions,omitempty"`
	// NetNamespaceFilePath is ceph-csi's: run Ceph clients in another network namespace.
	// monoceph does not; only an empty value is accepted.
	NetNamespaceFilePath string `json:"netNamespaceFilePath,omitempty"`
}

// RBDDefaults are per-cluster defaults for RBD volumes.
type RBDDefaults struct {
	// RadosNamespace is the namespace images are created in when a StorageClass names none.
	RadosNamespace string `json:"radosNamespace,omitempty"`
	// NetNamespaceFilePath: as CephFSDefaults'.
	NetNamespaceFilePath string `json:"netNamespaceFilePath,omitempty"`
	// MirrorDaemonCount is ceph-csi's hint for RBD mirroring (volume replication); accepted
	// and unused: monoceph asks no daemon count.
	MirrorDaemonCount int `json:"mirrorDaemonCount,omitempty"`
	// MirrorPeers are the clusters whose mirrored RBD images this cluster holds (RBD
	// mirroring, volume replication): a volume ID minted on a peer names the peer's cluster
	// ID and pool ID, and resolves here, on this entry's monitors, in the pool PoolIDs maps
	// it to. ceph-csi keeps the same mapping in a ConfigMap of its own (ClusterIDMapping,
	// RBDPoolIDMapping); here it is part of the entry of the cluster that needs it.
	MirrorPeers []MirrorPeer `json:"mirrorPeers,omitempty"`
}

// MirrorPeer maps a peer cluster's IDs to this cluster's: PoolIDs maps the peer's pool ID (a
// decimal string, as JSON keys are strings) to the ID of the pool of the same name here.
type MirrorPeer struct {
	ClusterID string           `json:"clusterID"`
	PoolIDs   map[string]int64 `json:"poolIDs"`
}

// ClusterMap is the whole configuration file: every cluster the driver serves.
type ClusterMap []Cluster

// DefaultSubvolumeGroup is used when neither the StorageClass nor the cluster map name a group.
const DefaultSubvolumeGroup = "csi"

// clusterIDPattern keeps IDs safe to embed in volume IDs, object names and metric labels.
var clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,35}$`)

// ValidClusterID reports whether id is a well-formed cluster ID.
func ValidClusterID(id string) bool { return clusterIDPattern.MatchString(id) }

// rados names may not contain '/' or NUL; keep them printable too.
var radosNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{0,64}$`)

// RADOS namespaces appear in volume IDs, which CSI limits to 128 bytes.
var namespacePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{0,32}$`)

// ParseClusterMap decodes and validates a cluster map. Unknown fields are rejected so that a
// misspelt key fails loudly instead of silently falling back to a default.
func ParseClusterMap(data []byte) (ClusterMap, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m ClusterMap
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("cluster map: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("cluster map: trailing data after the JSON array")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Validate reports the first problem of the map, naming the entry and field.
func (m ClusterMap) Validate() error {
	if len(m) == 0 {
		return fmt.Errorf("cluster map: no clusters defined")
	}
	seen := make(map[string]bool, len(m))
	for i, c := range m {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("cluster map entry %d: %w", i, err)
		}
		if seen[c.ClusterID] {
			return fmt.Errorf("cluster map entry %d: clusterID %q appears twice", i, c.ClusterID)
		}
		seen[c.ClusterID] = true
	}
	// a peer's cluster ID must name one place: never an entry too, never two entries' peer
	peers := map[string]string{}
	for _, c := range m {
		for _, p := range c.RBD.MirrorPeers {
			if seen[p.ClusterID] {
				return fmt.Errorf("cluster %q: rbd.mirrorPeers: %q is an entry of this map too: a volume ID of it would name two clusters", c.ClusterID, p.ClusterID)
			}
			if other, ok := peers[p.ClusterID]; ok {
				return fmt.Errorf("cluster %q: rbd.mirrorPeers: %q is a mirror peer of cluster %q too", c.ClusterID, p.ClusterID, other)
			}
			peers[p.ClusterID] = c.ClusterID
		}
	}
	return nil
}

// Validate checks one entry.
func (c Cluster) Validate() error {
	if !clusterIDPattern.MatchString(c.ClusterID) {
		return fmt.Errorf("clusterID %q: want 1-36 characters of [A-Za-z0-9._-], starting alphanumeric", c.ClusterID)
	}
	if len(c.Monitors) == 0 {
		return fmt.Errorf("cluster %q: monitors: at least one monitor address is required", c.ClusterID)
	}
	for _, mon := range c.Monitors {
		if _, err := MonitorEndpoints(mon); err != nil {
			return fmt.Errorf("cluster %q: monitors: %w", c.ClusterID, err)
		}
	}
	if !radosNamePattern.MatchString(c.CephFS.SubvolumeGroup) {
		return fmt.Errorf("cluster %q: cephFS.subvolumeGroup %q: want up to 64 characters of [A-Za-z0-9._-]", c.ClusterID, c.CephFS.SubvolumeGroup)
	}
	if !namespacePattern.MatchString(c.CephFS.RadosNamespace) {
		return fmt.Errorf("cluster %q: cephFS.radosNamespace %q: want up to 32 characters of [A-Za-z0-9._-]", c.ClusterID, c.CephFS.RadosNamespace)
	}
	if !namespacePattern.MatchString(c.RBD.RadosNamespace) {
		return fmt.Errorf("cluster %q: rbd.radosNamespace %q: want up to 32 characters of [A-Za-z0-9._-]", c.ClusterID, c.RBD.RadosNamespace)
	}
	if strings.ContainsAny(c.CephFS.KernelMountOptions+c.CephFS.FuseMountOptions, " \n") {
		return fmt.Errorf("cluster %q: cephFS.kernelMountOptions and fuseMountOptions must be comma-separated lists without spaces", c.ClusterID)
	}
	// ceph-csi's keys of features monoceph lacks: refused, never silently ignored
	for key, v := range map[string]string{"rbd.netNamespaceFilePath": c.RBD.NetNamespaceFilePath,
		"cephFS.netNamespaceFilePath": c.CephFS.NetNamespaceFilePath, "nfs.netNamespaceFilePath": c.NFS.NetNamespaceFilePath} {
		if v != "" {
			return fmt.Errorf("cluster %q: %s %q: running Ceph clients in another network namespace is not supported by monoceph", c.ClusterID, key, v)
		}
	}
	for _, p := range c.RBD.MirrorPeers {
		if !clusterIDPattern.MatchString(p.ClusterID) {
			return fmt.Errorf("cluster %q: rbd.mirrorPeers: clusterID %q: want 1-36 characters of [A-Za-z0-9._-], starting alphanumeric", c.ClusterID, p.ClusterID)
		}
		if len(p.PoolIDs) == 0 {
			return fmt.Errorf("cluster %q: rbd.mirrorPeers %q: poolIDs must map at least one pool ID", c.ClusterID, p.ClusterID)
		}
		// one-to-one: two of the peer's pools mapped to one pool here would let two volume IDs
		// of the peer name one image (the same name in different pools there)
		targets := map[int64]string{}
		for k, v := range p.PoolIDs {
			if id, err := strconv.ParseInt(k, 10, 64); err != nil || id < 0 || v < 0 || strconv.FormatInt(id, 10) != k {
				return fmt.Errorf("cluster %q: rbd.mirrorPeers %q: poolIDs %q: %d: want a pool ID (a decimal string) mapped to a pool ID", c.ClusterID, p.ClusterID, k, v)
			}
			if other, ok := targets[v]; ok {
				return fmt.Errorf("cluster %q: rbd.mirrorPeers %q: poolIDs %q and %q both map to pool %d: the mapping must be one-to-one", c.ClusterID, p.ClusterID, min(k, other), max(k, other), v)
			}
			targets[v] = k
		}
	}
	if c.ReadAffinity.Enabled && len(c.ReadAffinity.CrushLocationLabels) == 0 {
		return fmt.Errorf("cluster %q: readAffinity.enabled: crushLocationLabels must name the node labels of the CRUSH location", c.ClusterID)
	}
	return nil
}

// Lookup finds a cluster by its own ID, never through a mirror peer's: a class's clusterID
// and CephFS IDs name the cluster they were minted on.
func (m ClusterMap) Lookup(clusterID string) (Cluster, bool) {
	for _, c := range m {
		if c.ClusterID == clusterID {
			return c, true
		}
	}
	return Cluster{}, false
}

// LookupRBD is Lookup for the cluster ID of an existing monoceph RBD volume or snapshot ID: it
// also finds the cluster that lists clusterID among its RBD mirror peers (with MirrorOf set to
// it, so that RBDPoolID maps the ID's pool). Only RBD IDs resolve so: mirroring copies images.
func (m ClusterMap) LookupRBD(clusterID string) (Cluster, bool) {
	if c, ok := m.Lookup(clusterID); ok {
		return c, true
	}
	for _, c := range m {
		for _, p := range c.RBD.MirrorPeers {
			if p.ClusterID == clusterID {
				c.MirrorOf = clusterID
				return c, true
			}
		}
	}
	return Cluster{}, false
}

// RBDPoolID is the ID, on this cluster, of the pool a volume ID's pool ID names: the same ID,
// or, for an entry found through a mirror peer's cluster ID, the ID its poolIDs map it to.
// An unmapped pool is an error, never a guess: pool IDs of two clusters mean nothing alike.
func (c Cluster) RBDPoolID(id int64) (int64, error) {
	if c.MirrorOf == "" {
		return id, nil
	}
	for _, p := range c.RBD.MirrorPeers {
		if p.ClusterID != c.MirrorOf {
			continue
		}
		if local, ok := p.PoolIDs[strconv.FormatInt(id, 10)]; ok {
			return local, nil
		}
	}
	return 0, fmt.Errorf("cluster map: pool ID %d of cluster %q has no entry in the rbd.mirrorPeers poolIDs of cluster %q", id, c.MirrorOf, c.ClusterID)
}

// MonHost is the monitor list in the form librados' mon_host option takes.
func (c Cluster) MonHost() string {
	return strings.Join(c.Monitors, ",")
}

// SubvolumeGroupOrDefault is the cluster's subvolume group, or DefaultSubvolumeGroup.
func (c Cluster) SubvolumeGroupOrDefault() string {
	if c.CephFS.SubvolumeGroup != "" {
		return c.CephFS.SubvolumeGroup
	}
	return DefaultSubvolumeGroup
}

// Default monitor ports: 3300 speaks msgr2, 6789 the legacy protocol; a bare host means 6789,
// the same default librados applies.
const (
	MonitorPortV2 = 3300
	MonitorPortV1 = 6789
)

// MonitorEndpoints turns one monitor entry into "host:port" strings a TCP dialer accepts. It
// understands "host", "host:port", "[ipv6]:port" and the address vectors Ceph prints,
// "[v2:host:3300,v1:host:6789]".
func MonitorEndpoints(mon string) ([]string, error) {
	s := strings.TrimSpace(mon)
	if s == "" {
		return nil, fmt.Errorf("empty monitor address")
	}
	if strings.HasPrefix(s, "[v") && strings.HasSuffix(s, "]") {
		var out []string
		for _, part := range strings.Split(s[1:len(s)-1], ",") {
			proto, addr, ok := strings.Cut(part, ":")
			if !ok || (proto != "v1" && proto != "v2") {
				return nil, fmt.Errorf("monitor %q: address vector entry %q is not v1:<addr> or v2:<addr>", mon, part)
			}
			addr, _, _ = strings.Cut(addr, "/") // drop a nonce
			ep, err := hostPort(mon, addr, map[string]int{"v1": MonitorPortV1, "v2": MonitorPortV2}[proto])
			if err != nil {
				return nil, err
			}
			out = append(out, ep)
		}
		return out, nil
	}
	s = strings.TrimPrefix(strings.TrimPrefix(s, "v1:"), "v2:")
	ep, err := hostPort(mon, s, MonitorPortV1)
	if err != nil {
		return nil, err
	}
	return []string{ep}, nil
}

func hostPort(orig, s string, defPort int) (string, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
	} else if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		host = s // a bare IPv6 address
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" || strings.ContainsAny(host, " /,[]") {
		return "", fmt.Errorf("monitor %q: bad host %q", orig, host)
	}
	if port == "" {
		port = strconv.Itoa(defPort)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("monitor %q: bad port %q", orig, port)
	}
	return net.JoinHostPort(host, port), nil
}
