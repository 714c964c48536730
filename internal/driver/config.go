// Package driver decides which servers run in which mode and wires them together; it holds no
// storage logic of its own.
package driver

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/endpoint"
)

// Type is the storage backend a process serves.
type Type string

// Backends.
const (
	TypeRBD    Type = "rbd"
	TypeCephFS Type = "cephfs"
)

// Mode is which CSI services a process runs.
type Mode string

// Modes.
const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeAll        Mode = "all"
	// ModeMounter is the mount holder (package mounter): it owns a node's FUSE mounts and loop
	// devices for the node plugin of the same type, which can then restart freely.
	ModeMounter Mode = "mounter"
)

// Default driver names, one per backend so both can be installed side by side.
const (
	DefaultRBDDriverName    = "rbd.monoceph.io"
	DefaultCephFSDriverName = "cephfs.monoceph.io"
)

// Config is everything the process was told on its command line.
type Config struct {
	Type           Type
	Mode           Mode
	Endpoint       string
	NodeID         string
	DriverName     string
	ClusterConfig  string
	MetricsAddress string
	// KMSConfig is the KMS configuration of encrypted RBD volumes (package kms); "": none, only
	// the default provider.
	KMSConfig string

	// StateDir holds node-private state (FUSE mount points, staging records).
	StateDir string
	// MounterEndpoint is the mount holder's socket (node and all modes): FUSE mounts and loop
	// devices are then the holder's; "" keeps them in this process.
	MounterEndpoint string
	// NodeCommandTimeout bounds each filesystem command of a node (mkfs, fsck, resize2fs,
	// xfs_growfs); other node commands are bounded by CephTimeouts.Op. 0: the node's default.
	NodeCommandTimeout time.Duration
	// RBDMaxCloneDepth is the parent chain length past which new clones are flattened.
	RBDMaxCloneDepth int
	// CephFSCloneWait is how long CreateVolume waits for a CephFS clone before answering
	// ABORTED (0: cephfs.DefaultCloneWait).
	CephFSCloneWait time.Duration
	// ReadNodeLabels makes the node plugin read its Node object's labels (the Node named
	// NodeID), which give its CRUSH location for the cluster map's readAffinity.
	ReadNodeLabels bool
	// DomainLabels are the node labels that make the node's topology (ceph-csi's
	// --domainlabels), for topologyConstrainedPools: NodeGetInfo answers them, and the plugin
	// advertises VOLUME_ACCESSIBILITY_CONSTRAINTS (RBD only).
	DomainLabels []string
	// CephCSIInstanceID is the --instanceid of a ceph-csi deployment whose volumes this
	// process serves (the suffix of ceph-csi's journal objects); "" means ceph-csi's default.
	CephCSIInstanceID string
	// ClusterName names the Kubernetes cluster on every image and subvolume created
	// (csi.ceph.com/cluster/name, as ceph-csi's --clustername); "" stores none.
	ClusterName string

	// CSIAddonsEndpoint is the csi-addons socket (Identity, FenceController); "" serves none.
	CSIAddonsEndpoint string
	// FenceExpiry is how long fence entries live (0: blocklist.DefaultExpiry).
	FenceExpiry time.Duration
	// FenceFallbackMaxPrefixV4 and V6 bound the per-address fallback (0: fence defaults).
	FenceFallbackMaxPrefixV4 int
	FenceFallbackMaxPrefixV6 int

	// SnapshotMetadata configures changed block tracking (RBD controller only).
	SnapshotMetadata SnapshotMetadataConfig
	// Attach configures the controllers' own credentials and out-of-service fencing.
	Attach AttachConfig

	CephTimeouts  ceph.Timeouts
	ConnIdleTTL   time.Duration
	HealthTimeout time.Duration
	ShutdownGrace time.Duration
}

// RunsController reports whether the controller service is served.
func (c Config) RunsController() bool { return c.Mode == ModeController || c.Mode == ModeAll }

// RunsNode reports whether the node service is served.
func (c Config) RunsNode() bool { return c.Mode == ModeNode || c.Mode == ModeAll }

// NodeStateDir is where the node service (and its mount holder) keep a driver's state.
func (c Config) NodeStateDir() string { return filepath.Join(c.StateDir, c.DriverName) }

// DefaultMounterEndpoint is the mount holder's socket in the node state directory.
func (c Config) DefaultMounterEndpoint() string {
	return "unix://" + filepath.Join(c.NodeStateDir(), "mounter.sock")
}

// instanceIDPattern: ceph-csi's instance ID becomes part of RADOS object names.
var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// The CSI spec: a driver name is at most 63 characters, a DNS-1123-like domain name.
var driverNamePattern = regexp.MustCompile(`^[a-zA-Z0-9]([-a-zA-Z0-9.]{0,61}[a-zA-Z0-9])?$`)

// Complete fills defaults and reports the first misconfiguration as one line.
func (c *Config) Complete() error {
	switch c.Type {
	case TypeRBD:
		if c.DriverName == "" {
			c.DriverName = DefaultRBDDriverName
		}
	case TypeCephFS:
		if c.DriverName == "" {
			c.DriverName = DefaultCephFSDriverName
		}
	case "":
		return errors.New("--type is required: rbd or cephfs")
	default:
		return fmt.Errorf("--type=%q: want rbd or cephfs", c.Type)
	}
	switch c.Mode {
	case ModeController, ModeNode, ModeAll, ModeMounter:
	default:
		return fmt.Errorf("--mode=%q: want controller, node, all or mounter", c.Mode)
	}
	if !driverNamePattern.MatchString(c.DriverName) {
		return fmt.Errorf("--drivername=%q: want at most 63 characters of [a-zA-Z0-9.-], starting and ending alphanumeric", c.DriverName)
	}
	if c.Mode == ModeMounter && strings.TrimSpace(c.Endpoint) == "" {
		c.Endpoint = c.DefaultMounterEndpoint()
	}
	if _, err := endpoint.SocketPath(c.Endpoint); err != nil {
		return fmt.Errorf("--endpoint: %w", err)
	}
	if c.MounterEndpoint != "" {
		if !c.RunsNode() {
			return fmt.Errorf("--mounter-endpoint: only node and all modes use a mount holder, not --mode=%s", c.Mode)
		}
		if _, err := endpoint.SocketPath(c.MounterEndpoint); err != nil {
			return fmt.Errorf("--mounter-endpoint: %w", err)
		}
	}
	if c.RunsNode() && c.NodeID == "" {
		return errors.New("--nodeid is required in node and all modes")
	}
	if c.ClusterConfig == "" && c.Mode != ModeMounter {
		return errors.New("--cluster-config is required: the path of the cluster map")
	}
	if c.MetricsAddress != "" {
		c.MetricsAddress = bracketIPv6(c.MetricsAddress)
	}
	for name, d := range map[string]time.Duration{
		"--ceph-connect-timeout": c.CephTimeouts.Connect, "--ceph-op-timeout": c.CephTimeouts.Op,
		"--conn-idle-ttl": c.ConnIdleTTL, "--health-timeout": c.HealthTimeout, "--shutdown-grace": c.ShutdownGrace,
	} {
		if d <= 0 {
			return fmt.Errorf("%s=%v: must be positive", name, d)
		}
	}
	if c.NodeCommandTimeout < 0 {
		return fmt.Errorf("--node-command-timeout=%v: must not be negative", c.NodeCommandTimeout)
	}
	if c.CephCSIInstanceID != "" && !instanceIDPattern.MatchString(c.CephCSIInstanceID) {
		return fmt.Errorf("--cephcsi-instance-id=%q: want 1-64 characters of [A-Za-z0-9._-]", c.CephCSIInstanceID)
	}
	if c.CephFSCloneWait < 0 {
		return fmt.Errorf("--cephfs-clone-wait=%v: must not be negative", c.CephFSCloneWait)
	}
	if err := c.completeCSIAddons(); err != nil {
		return err
	}
	if err := c.completeAttach(); err != nil {
		return err
	}
	return c.completeSnapshotMetadata()
}

// bracketIPv6 writes "fd00::1:9080" as "[fd00::1]:9080": the chart builds the node plugins'
// listen address from the downward API's status.hostIP, which gives an IPv6 address without
// brackets. Anything else is returned as it is, for net.Listen to judge.
func bracketIPv6(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return addr
	}
	if ip, err := netip.ParseAddr(addr[:i]); err == nil && ip.Is6() {
		return net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return addr
}
