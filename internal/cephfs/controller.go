package cephfs

import (
	"context"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephcsi"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/volcap"
)

// DefaultCloneWait lets most small clones finish within one CreateVolume call. On Pacific the
// volumes module's steps for even an empty clone can each stall until a 5-second beat (median
// 1.4 s, longest 9.1 s over four test runs), so some still answer ABORTED and are retried.
const DefaultCloneWait = 8 * time.Second

// Options configure the controller.
type Options struct {
	Clusters *clustermap.Store
	Pool     *ceph.Pool
	Locks    *oplock.Locks
	// DefaultSize is the quota of a volume whose request names no capacity.
	DefaultSize int64
	// CloneWait is how long CreateVolume waits for a clone to finish before answering
	// ABORTED (the CO retries); 0 means DefaultCloneWait.
	CloneWait time.Duration
	// CephCSIInstanceID is the --instanceid of the ceph-csi deployment whose volumes this
	// controller took over: the suffix of its journal's directory objects.
	CephCSIInstanceID string
	// ClusterName is stored on every subvolume this controller creates (owner.ClusterName), so
	// objects of several Kubernetes clusters sharing a Ceph cluster can be told apart.
	ClusterName string
}

// Controller is the CSI Controller service for CephFS.
type Controller struct {
	csi.UnimplementedControllerServer
	controller.Base
	opts Options
	fss  fsCache

	groupsMu sync.Mutex
	groups   map[string]bool // cluster/fs/group known to exist

	// group snapshots: the manager's quiesce command and which clusters have it
	mgr     mgrAPI
	quiesce commandSupport
	// and which have `fs subvolume metadata` (ownership keys)
	metadata commandSupport
}

// NewController builds the service.
func NewController(o Options) *Controller {
	if o.DefaultSize <= 0 {
		o.DefaultSize = 1 << 30
	}
	if o.CloneWait <= 0 {
		o.CloneWait = DefaultCloneWait
	}
	if o.CephCSIInstanceID == "" {
		o.CephCSIInstanceID = cephcsi.DefaultInstanceID
	}
	return &Controller{Base: controller.Base{Clusters: o.Clusters, Pool: o.Pool, SecretOrder: ceph.AdminFirst, Users: controller.NewClassUsers()}, opts: o, groups: map[string]bool{}, mgr: cephMgr{}}
}

// Every access mode works on a shared filesystem; there is no raw block CephFS volume.
var support = volcap.Support{
	MountModes: map[csi.VolumeCapability_AccessMode_Mode]bool{
		csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:    true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_SINGLE_WRITER:  true,
		csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER:   true,
	},
	// the filesystem is CephFS itself; "" and "ceph" are what a CO may ask for
	FsTypes: map[string]bool{"ceph": true, "cephfs": true},
}

// ControllerGetCapabilities lists what this controller implements (see the RBD controller for
// why ListVolumes and ControllerGetVolume are not offered).
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
	), nil
}

// journalNamespace is where the driver's objects go in the metadata pool: apart from the MDS's
// own objects, so the driver can never collide with them.
func journalNamespace(cl v1.Cluster) string {
	if cl.CephFS.RadosNamespace != "" {
		return cl.CephFS.RadosNamespace
	}
	return "csi"
}

// ensureGroup creates the subvolume group once per process (creating an existing group is a
// no-op for the volumes module, but costs a manager round trip on every CreateVolume).
func (c *Controller) ensureGroup(clusterID string, s site, group string) error {
	key := clusterID + "/" + s.fs.Name + "/" + group
	c.groupsMu.Lock()
	known := c.groups[key]
	c.groupsMu.Unlock()
	if known {
		return nil
	}
	if err := s.admin.CreateSubVolumeGroup(s.fs.Name, group, nil); err != nil {
		return ceph.Wrap("create subvolume group "+group, err)
	}
	c.groupsMu.Lock()
	c.groups[key] = true
	c.groupsMu.Unlock()
	return nil
}

// forgetGroup drops a cached group (it may have been removed behind our back).
func (c *Controller) forgetGroup(clusterID string, s site, group string) {
	c.groupsMu.Lock()
	delete(c.groups, clusterID+"/"+s.fs.Name+"/"+group)
	c.groupsMu.Unlock()
}
