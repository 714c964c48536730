package rbd

import (
	"context"
	"errors"

	"github.com/ceph/go-ceph/rados"
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/volcap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Options configure the controller.
type Options struct {
	Clusters *clustermap.Store
	Pool     *ceph.Pool
	Locks    *oplock.Locks
	// MaxCloneDepth is the longest parent chain a new clone may have before it is flattened:
	// long chains make every read walk them and keep every ancestor alive.
	MaxCloneDepth int
	// DefaultSize is used when a CreateVolume names no capacity.
	DefaultSize int64
	// Nodes, when set, lets ControllerPublishVolume answer NOT_FOUND for an unknown node.
	Nodes NodeChecker
	// Secrets, when set, gives the credentials of ControllerPublishVolume and
	// ControllerUnpublishVolume requests that carry none (see publishSecrets).
	Secrets func(context.Context) (map[string]string, error)
	// CephCSIInstanceID is the --instanceid of the ceph-csi deployment whose volumes this
	// controller took over: the suffix of its journal's directory objects.
	CephCSIInstanceID string
	// TopologyPrefix is the prefix of the driver's topology keys (TopologyPrefix), which
	// topologyConstrainedPools' domain labels follow.
	TopologyPrefix string
	// ClusterName is stored on every image this controller creates (owner.ClusterName), so
	// objects of several Kubernetes clusters sharing a Ceph cluster can be told apart.
	ClusterName string
	// KMS is the KMS configuration (--kms-config) encrypted classes name entries of; nil: only
	// the default provider.
	KMS *kms.Config
}

// Controller is the CSI Controller service for RBD.
type Controller struct {
	csi.UnimplementedControllerServer
	controller.Base
	opts Options
}

// NewController builds the service.
func NewController(o Options) *Controller {
	if o.MaxCloneDepth <= 0 {
		o.MaxCloneDepth = 8
	}
	if o.DefaultSize <= 0 {
		o.DefaultSize = 1 << 30
	}
	if o.CephCSIInstanceID == "" {
		o.CephCSIInstanceID = cephcsi.DefaultInstanceID
	}
	return &Controller{Base: controller.Base{Clusters: o.Clusters, Pool: o.Pool, Users: controller.NewClassUsers()}, opts: o}
}

var supportedFsTypes = map[string]bool{"ext4": true, "xfs": true}

// support: single-node modes with a filesystem; shared read-only filesystems; any mode on raw
// block, where the application (a clustered database, a VM live migration) coordinates writers.
var support = volcap.Support{
	Block: true,
	MountModes: map[csi.VolumeCapability_AccessMode_Mode]bool{
		csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    true,
	},
	BlockModes: map[csi.VolumeCapability_AccessMode_Mode]bool{
		csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:  true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:   true,
	},
	FsTypes: supportedFsTypes,
}

// ControllerGetCapabilities lists what this controller implements. ListVolumes and
// ControllerGetVolume carry no secrets, so they are not offered; GetCapacity answers from a
// connection an earlier RPC opened.
func (c *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return controller.Capabilities(
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_READONLY,
	), nil
}

// poolByID resolves the pool ID of an ID; a pool that no longer exists means the volume does
// not either (ErrNotFound).
func poolByID(ctx context.Context, conn *ceph.Conn, id int64) (string, error) {
	return ceph.Call(ctx, conn, "look up pool", func(r *rados.Conn) (string, error) { return r.GetPoolByID(id) })
}

// poolByName resolves a StorageClass's pool to its ID, which volume IDs carry.
func poolByName(ctx context.Context, conn *ceph.Conn, name string) (int64, error) {
	return ceph.Call(ctx, conn, "look up pool", func(r *rados.Conn) (int64, error) { return r.GetPoolByName(name) })
}

// idCluster resolves the cluster ID of an existing monoceph RBD volume or snapshot ID: on the
// secondary site of volume replication it names the mirror peer the ID was minted on, and
// locate then maps its pool ID. A class's clusterID (a Create) goes through c.Cluster, exact.
func (c *Controller) idCluster(id string, code codes.Code, field string) (v1.Cluster, error) {
	cl, err := c.Clusters.RBDCluster(id)
	if err != nil {
		return cl, status.Errorf(code, "%s: %v", field, err)
	}
	return cl, nil
}

// volumeCluster is idCluster for a volume ID, and csiCluster for a ceph-csi handle.
func (c *Controller) volumeCluster(id volumeID, code codes.Code, field string) (v1.Cluster, error) {
	if id.CSI != nil {
		return c.csiCluster(id.CSI.ClusterID, code, field)
	}
	return c.idCluster(id.Own.ClusterID, code, field)
}

// csiCluster resolves the cluster ID of a ceph-csi handle. A handle reached only through a
// mirror peer is refused: its pool ID is the peer's and ceph-csi's journal objects are not
// mirrored, so nothing here could find its image.
func (c *Controller) csiCluster(id string, code codes.Code, field string) (v1.Cluster, error) {
	cl, err := c.Cluster(id, code, field)
	if err != nil {
		if peer, perr := c.Clusters.RBDCluster(id); perr == nil {
			return cl, status.Errorf(codes.FailedPrecondition, "%s: ceph-csi volume handles of cluster %q, a mirror peer of %q, are not resolved on the peer (replicate monoceph volumes)", field, id, peer.ClusterID)
		}
	}
	return cl, err
}

// locate connects with the RPC's secrets and resolves a pool ID from an ID. gone reports a
// pool that no longer exists (so neither does anything in it); the caller releases p.Conn
// unless gone or err.
func (c *Controller) locate(ctx context.Context, cl v1.Cluster, poolID int64, ns string, secrets map[string]string) (p radosop.Location, gone bool, err error) {
	// a volume ID of a mirror peer (volume replication) names the peer's pool ID
	poolID, err = cl.RBDPoolID(poolID)
	if err != nil {
		return radosop.Location{}, false, status.Error(codes.FailedPrecondition, err.Error())
	}
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return radosop.Location{}, false, err
	}
	pool, err := poolByID(ctx, conn, poolID)
	if err != nil {
		conn.Release()
		gone, err = mappedPoolErr(cl, poolID, err)
		return radosop.Location{}, gone, err
	}
	return radosop.Location{Conn: conn, Pool: pool, Namespace: ns}, false, nil
}

// mappedPoolErr says whether a failed pool lookup means the ID's objects are gone. A pool ID that
// came through a mirror peer's poolIDs and names no pool here is a wrong map, not a volume
// gone: answering DeleteVolume OK would leak the image, so it is FAILED_PRECONDITION.
func mappedPoolErr(cl v1.Cluster, poolID int64, err error) (gone bool, _ error) {
	if !errors.Is(err, ceph.ErrNotFound) {
		return false, err
	}
	if cl.MirrorOf != "" {
		return false, status.Errorf(codes.FailedPrecondition, "cluster map: rbd.mirrorPeers %q of cluster %q maps to pool ID %d, which does not exist: %v", cl.MirrorOf, cl.ClusterID, poolID, err)
	}
	return true, err
}

// orNotFound turns a Ceph "not found" into NOT_FOUND with what, other errors pass on.
func orNotFound(err error, what string) error {
	if errors.Is(err, ceph.ErrNotFound) {
		return controller.NotFoundf("%s does not exist", what)
	}
	return err
}
