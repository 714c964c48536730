package nodefence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/holder"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Connect opens a connection to a cluster of the map as the controller itself, and resolves
// pool IDs there.
type Connect func(ctx context.Context, clusterID string) (*ceph.Conn, error)

// RBD finds the clients of a node through its VolumeAttachments: each names a PV of this
// driver, whose volume's attachment object holds the addresses the node's plugin recorded at
// NodeStageVolume. A volume the node staged before plugins recorded addresses, and that is
// published to that node only, counts its current clients (watchers and lock owner) as the
// node's.
type RBD struct {
	Driver  string
	Connect Connect

	vas storagelisters.VolumeAttachmentLister
	pvs corelisters.PersistentVolumeLister
}

// nodeIDAnnotation is where the external-attacher notes the CSI node ID of an attachment.
const nodeIDAnnotation = "csi.alpha.kubernetes.io/node-id"

// Watch implements Backend: a new or changed attachment of a node may bring new clients.
func (b *RBD) Watch(f informers.SharedInformerFactory, enqueue func(string)) {
	vas := f.Storage().V1().VolumeAttachments()
	b.vas, b.pvs = vas.Lister(), f.Core().V1().PersistentVolumes().Lister()
	f.Core().V1().PersistentVolumes().Informer() // registered, so the factory starts and syncs it
	_, _ = vas.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { enqueueVA(o, enqueue) },
		UpdateFunc: func(_, o any) { enqueueVA(o, enqueue) },
	})
}

func enqueueVA(o any, enqueue func(string)) {
	if va, ok := o.(*storagev1.VolumeAttachment); ok {
		enqueue(va.Spec.NodeName)
	}
}

// Clients implements Backend; a volume it cannot read is reported, the others are returned.
func (b *RBD) Clients(ctx context.Context, node string) (map[string][]netip.Addr, error) {
	all, err := b.vas.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := map[string][]netip.Addr{}
	var errs []error
	for _, va := range all {
		if va.Spec.Attacher != b.Driver || va.Spec.NodeName != node || va.Spec.Source.PersistentVolumeName == nil {
			continue
		}
		pv, err := b.pvs.Get(*va.Spec.Source.PersistentVolumeName)
		if err != nil || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != b.Driver {
			continue // gone, or not ours
		}
		v, ok := siteOf(pv)
		if !ok {
			continue
		}
		nodeID := va.Annotations[nodeIDAnnotation]
		if nodeID == "" {
			nodeID = node
		}
		addrs, err := b.volumeClients(ctx, v, nodeID)
		if err != nil {
			// one volume (or cluster) that cannot be read keeps none of the others from being fenced
			errs = append(errs, fmt.Errorf("volume %s: %w", pv.Name, err))
			continue
		}
		for _, a := range addrs {
			if !slices.Contains(out[v.clusterID], a) {
				out[v.clusterID] = append(out[v.clusterID], a)
			}
		}
	}
	return out, errors.Join(errs...)
}

// site is where a PV's image and attachment object are.
type site struct {
	clusterID string
	poolID    int64  // monoceph's IDs name the pool by ID
	pool      string // ceph-csi's volume contexts by name
	namespace string
	image     string
	key       string // attachment.Key
}

// siteOf reads where the volume of a PV of this driver is: from monoceph's volume ID, or for a
// volume ceph-csi created from its handle and the volume context the node stages it by.
func siteOf(pv *corev1.PersistentVolume) (site, bool) {
	handle := pv.Spec.CSI.VolumeHandle
	key, ok := attachment.Key(handle)
	if !ok {
		return site{}, false
	}
	if id, err := volid.ParseRBDVolume(handle); err == nil {
		return site{clusterID: id.ClusterID, poolID: id.PoolID, namespace: id.Namespace, image: rbdname.Image(id.UID), key: key}, true
	}
	h, _ := volid.ParseHandle(handle)
	img, err := volumecontext.Parse(pv.Spec.CSI.VolumeAttributes)
	if err != nil {
		return site{}, false
	}
	return site{clusterID: h.ClusterID, pool: img.Pool, namespace: img.Namespace, image: img.Name, key: key}, true
}

func (b *RBD) volumeClients(ctx context.Context, v site, nodeID string) ([]netip.Addr, error) {
	conn, err := b.Connect(ctx, v.clusterID)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	pool := v.pool
	if pool == "" {
		pool, err = ceph.Call(ctx, conn, "look up pool", func(r *rados.Conn) (string, error) { return r.GetPoolByID(v.poolID) })
		if ceph.Is(err, ceph.ErrNotFound) {
			return nil, nil
		}
	}
	if err != nil {
		return nil, err
	}
	loc := radosop.Location{Conn: conn, Pool: pool, Namespace: v.namespace}
	st, err := attachment.Read(ctx, loc, v.key)
	if ceph.Is(err, ceph.ErrNotFound) {
		return nil, nil // the pool a ceph-csi volume context names is gone
	}
	if err != nil {
		return nil, err
	}
	if c := st.Clients[nodeID]; len(c.Addrs) > 0 {
		return c.Addrs, nil
	}
	if nodes := st.Nodes(); len(nodes) != 1 || nodes[0] != nodeID {
		return nil, nil
	}
	image := v.image
	hs, err := radosop.With(ctx, loc, "list clients of "+image, func(io *rados.IOContext) (holder.Set, error) {
		return holder.List(io, image)
	})
	if ceph.Is(err, ceph.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, h := range hs {
		if !slices.Contains(out, h.Addr) {
			out = append(out, h.Addr)
		}
	}
	klog.FromContext(ctx).Info("No recorded client addresses for a volume published to the node only; taking its current clients",
		"volume", loc.String()+"/"+image, "addrs", out)
	return out, nil
}

// Cut implements Backend: for RBD the blocklist is all it takes (OSDs drop the watches of
// blocklisted clients, and librbd breaks their locks).
func (b *RBD) Cut(context.Context, string, string, []netip.Addr) error { return nil }
