package rbd

import (
	"context"
	"strconv"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"github.com/monoceph/monoceph/internal/volcap"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// Journal attributes of a volume reservation: what a repeat of the request must match and
// what a resumed create needs.
const (
	attrSize     = "size"
	attrSource   = "source"
	attrFeatures = "features"
	attrDataPool = "dataPool"
	// attrOrigin records a ceph-csi source's image (origin.attr), for purging it from the trash
	attrOrigin = "origin"
	// attrState is set to stateReady once a clone is complete: a clone without a parent is
	// then a flattened one, not one whose creation was cut short.
	attrState  = "state"
	stateReady = "ready"
	// attrEncryption is encryptionLUKS2 for an encrypted volume, with its KMS in attrKMSID;
	// absent for a plain one (and in every record older than encryption)
	attrEncryption  = "encryption"
	attrKMSID       = "encryptionKMSID"
	encryptionLUKS2 = "luks2"
)

// source is a decoded volume_content_source: IDs of either format.
type source = controller.Source[snapshotID, volumeID]

func sourceCluster(s source) string {
	switch {
	case s.Snap != nil:
		return s.Snap.ClusterID()
	case s.Vol != nil:
		return s.Vol.ClusterID()
	}
	return ""
}

func parseSource(cs *csi.VolumeContentSource) (source, error) {
	return controller.ParseSource(cs, parseSnapshotID, parseVolumeID)
}

// createRequest is a CreateVolume whose fields passed the checks that need no cluster.
type createRequest struct {
	name   string
	size   int64
	params volumeParams
	src    source
	qos    qos // from mutable_parameters (a VolumeAttributesClass)
}

// validateCreate checks everything a CreateVolume carries that can be checked without Ceph.
func validateCreate(req *csi.CreateVolumeRequest, defaultSize int64) (createRequest, error) {
	r := createRequest{name: req.GetName()}
	if r.name == "" {
		return r, status.Error(codes.InvalidArgument, "name is missing")
	}
	if err := support.Validate(req.GetVolumeCapabilities()); err != nil {
		return r, err
	}
	var err error
	if r.size, err = volcap.Size(req.GetCapacityRange(), defaultSize); err != nil {
		return r, err
	}
	if r.params, err = parseVolumeParams(req.GetParameters()); err != nil {
		return r, err
	}
	if r.qos, err = parseQoS(req.GetMutableParameters()); err != nil {
		return r, err
	}
	if r.src, err = parseSource(req.GetVolumeContentSource()); err != nil {
		return r, err
	}
	if id := sourceCluster(r.src); id != "" && id != r.params.ClusterID {
		return r, status.Errorf(codes.InvalidArgument, "volume_content_source is on cluster %q, the volume would be on %q", id, r.params.ClusterID)
	}
	return r, nil
}

// CreateVolume reserves the name in the journal, then creates (or finishes creating) the image.
// Every step is idempotent, so a retry after a crash at any point converges on one image. What
// can be checked is checked before the reservation, and a create that fails for good gives
// its reservation back: a request that cannot succeed leaves nothing behind.
func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	r, err := validateCreate(req, c.opts.DefaultSize)
	if err != nil {
		return nil, err
	}
	name, params := r.name, r.params
	cl, err := c.Cluster(params.ClusterID, codes.InvalidArgument, "parameters[\"clusterID\"]")
	if err != nil {
		return nil, err
	}
	if !params.nsSet {
		params.Namespace = cl.RBD.RadosNamespace
	}
	key, err := c.classEncryption(ctx, params, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	if key != nil {
		defer clear(key.pass) // a copy of the secret's; nothing reads it after this call
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateVolume", "rbd-volume-name:"+name)
	if err != nil {
		return nil, err
	}
	defer unlock()

	conn, err := c.Connect(ctx, cl, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	c.RememberClassUser(req.GetParameters(), req.GetSecrets()) // for GetCapacity
	topology, poolID, err := c.placeVolume(ctx, conn, &params, name, req.GetAccessibilityRequirements())
	if err != nil {
		return nil, err
	}
	n := newImage{dst: radosop.Location{Conn: conn, Pool: params.Pool, Namespace: params.Namespace},
		size: r.size, params: params, src: r.src, key: key}
	if err := c.checkSourceOf(ctx, conn, &n); err != nil {
		return nil, err
	}
	if err := n.reserve(ctx, req, name); err != nil {
		return nil, err
	}
	faultpoint.Hit("rbd.CreateVolume.reserved")
	log := klog.FromContext(ctx).WithValues("image", n.dst.String()+"/"+rbdname.Image(n.rec.UID))

	id := volid.RBDVolume{ClusterID: params.ClusterID, PoolID: poolID, Namespace: params.Namespace, UID: n.rec.UID}
	if err := c.makeImage(ctx, req, n, id, r.qos); err != nil {
		return nil, err
	}
	if n.src.String() != "" && n.rec.Attrs[attrState] != stateReady {
		n.rec.Attrs[attrState] = stateReady
		if err := journal.SetAttrs(ctx, n.dst, journal.Volume, n.rec); err != nil {
			return nil, err
		}
	}
	faultpoint.Hit("rbd.CreateVolume.image")
	log.V(2).Info("Volume ready", "name", name, "size", n.size, "source", n.src.String(), "resumed", !n.created)

	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      id.String(),
		CapacityBytes: n.size,
		VolumeContext: volumecontext.Image{ClusterID: params.ClusterID, Pool: params.Pool, Namespace: params.Namespace,
			Name: rbdname.Image(n.rec.UID), Mounter: params.Mounter, TryOtherMounters: params.TryOtherMounters,
			Encrypted: key != nil, Librbd: key != nil, KMSID: params.KMSID}.Map(),
		ContentSource:      req.GetVolumeContentSource(),
		AccessibleTopology: topology,
	}}, nil
}

// newImage is one CreateVolume's image, filled in step by step: where it goes and from what
// (before the reservation), then its reservation.
type newImage struct {
	dst    radosop.Location
	size   int64 // the volume's size; on a repeat, the size the reservation recorded
	params volumeParams
	src    source
	key    *classKey // the class's encryption, nil for a plain volume
	o      origin
	srcEnc *kms.ImageState // the source's encryption, nil for a plain source (or none)
	// raw is the image's size: an encrypted copy is larger than the volume by its source's
	// LUKS header
	raw     uint64
	rec     *journal.Record
	created bool // the reservation is new: there is no image of it yet
}

// placeVolume picks the pool by topology when the class names topology pools (filling in
// params), then checks the placement exists, before anything is written there.
func (c *Controller) placeVolume(ctx context.Context, conn *ceph.Conn, params *volumeParams, name string, req *csi.TopologyRequirement) ([]*csi.Topology, int64, error) {
	var topology []*csi.Topology
	if len(params.TopologyPools) > 0 {
		var err error
		if topology, err = c.placeByTopology(ctx, conn, params, name, req); err != nil {
			return nil, 0, err
		}
	}
	poolID, err := checkPlacement(ctx, conn, *params)
	return topology, poolID, err
}

// checkSourceOf resolves the content source and checks it can be copied at the image's size,
// before the reservation: a request that cannot succeed must leave nothing behind.
func (c *Controller) checkSourceOf(ctx context.Context, conn *ceph.Conn, n *newImage) error {
	o, err := c.resolveSource(ctx, conn, n.src)
	if err != nil {
		return err
	}
	srcEnc, err := sourceEncryption(ctx, o, n.key)
	if err != nil {
		return err
	}
	n.o, n.srcEnc, n.raw = o, srcEnc, uint64(n.size)
	if srcEnc != nil {
		n.raw += srcEnc.HeaderBytes
	}
	return checkSource(ctx, o, n.raw)
}

// reserve reserves the name with what a repeat must agree with, or finds the reservation of an
// earlier attempt and checks the request is the same; a repeat takes the recorded size.
func (n *newImage) reserve(ctx context.Context, req *csi.CreateVolumeRequest, name string) error {
	attrs := map[string]string{
		attrSize: strconv.FormatInt(n.size, 10), attrSource: n.src.String(),
		attrFeatures: joinFeatures(n.params.Features), attrDataPool: n.params.DataPool,
	}
	if n.o.csi != nil {
		attrs[attrOrigin] = n.o.attr(n.o.csi.LocationID)
	}
	if n.key != nil {
		attrs[attrEncryption], attrs[attrKMSID] = encryptionLUKS2, n.key.kmsID
	}
	rec, created, err := journal.Reserve(ctx, n.dst, journal.Volume, name, attrs)
	if err != nil {
		return err
	}
	n.rec, n.created = rec, created
	if !created {
		if n.size, err = compatible(rec, req, n.src, n.key); err != nil {
			return err
		}
	}
	if n.srcEnc != nil {
		n.raw = uint64(n.size) + n.srcEnc.HeaderBytes // a repeat: the size the volume was made with
	}
	return nil
}

// makeImage creates (or finishes creating) the reserved image: its content, then encryption,
// QoS and owner. A failure gives the reservation back, unless an image of it already exists.
func (c *Controller) makeImage(ctx context.Context, req *csi.CreateVolumeRequest, n newImage, id volid.RBDVolume, q qos) error {
	image := rbdname.Image(n.rec.UID)
	var err error
	switch {
	case n.rec.Attrs[attrState] == stateReady:
	case n.o.member != nil:
		err = c.restoreMember(ctx, n.dst, n.rec.UID, uint64(n.size), n.params, *n.o.member)
	case n.src.Snap != nil:
		err = c.clone(ctx, n.o.loc, n.o.image, n.o.snap, n.dst, image, n.raw, n.params, n.o.what)
	case n.src.Vol != nil:
		err = c.cloneFromVolume(ctx, n.dst, n.rec.UID, n.raw, n.params, n.o)
	default:
		err = ensureBlank(ctx, n.dst, image, uint64(n.size), n.params, n.created)
	}
	if err == nil && n.key != nil {
		// every time: a crash after the create may have come before the encryption
		err = ensureEncrypted(ctx, n.dst, image, id.String(), uint64(n.size), n.key)
	}
	if err == nil && len(q) > 0 {
		// every time, not only for a new image: a crash after the create may have come first
		err = setQoS(ctx, n.dst, image, q)
	}
	if err == nil {
		// every time too, and before the volume is answered: an image the CO was given
		// always names its PV
		err = setImageOwner(ctx, n.dst, image, owner.FromParams(req.GetParameters(), owner.VolumeKeys, c.opts.ClusterName), true)
	}
	if err != nil {
		giveBack(ctx, n.dst, journal.Volume, n.rec, err, func(io *rados.IOContext) (bool, error) {
			st, err := inspect(io, image)
			return st.exists, err
		})
	}
	return err
}

// checkPlacement checks that the pool, RBD namespace and data pool a volume would use exist,
// before anything is written there (the journal would otherwise create objects in whatever
// namespace a request names), and returns the pool's ID.
func checkPlacement(ctx context.Context, conn *ceph.Conn, params volumeParams) (int64, error) {
	poolID, err := poolByName(ctx, conn, params.Pool)
	if ceph.Is(err, ceph.ErrNotFound) {
		return 0, classparam.InvalidParam(paramPool, "pool %q does not exist", params.Pool)
	}
	if err != nil {
		return 0, err
	}
	if params.DataPool != "" {
		_, err := poolByName(ctx, conn, params.DataPool)
		if ceph.Is(err, ceph.ErrNotFound) {
			return 0, classparam.InvalidParam(paramDataPool, "pool %q does not exist", params.DataPool)
		}
		if err != nil {
			return 0, err
		}
	}
	if params.Namespace != "" {
		ok, err := radosop.With(ctx, radosop.Location{Conn: conn, Pool: params.Pool}, "look up namespace", func(io *rados.IOContext) (bool, error) {
			return rbd.NamespaceExists(io, params.Namespace)
		})
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, classparam.InvalidParam(paramRadosNamespace, "RBD namespace %q does not exist in pool %q", params.Namespace, params.Pool)
		}
	}
	return poolID, nil
}

// giveBack releases rec, the reservation of a create that failed for good (see
// controller.Permanent), unless made finds something on Ceph made for it (by this call or by
// one that crashed): that keeps its reservation for the CO's retry or delete. Any other
// failure keeps it too, for the retry that resumes the create.
func giveBack(ctx context.Context, p radosop.Location, k journal.Kind, rec *journal.Record, cause error, made func(*rados.IOContext) (bool, error)) {
	if !controller.Permanent(cause) {
		return
	}
	log := klog.FromContext(ctx)
	found, err := radosop.With(ctx, p, "inspect remains of "+rec.Name, made)
	if err != nil || found {
		log.V(2).Info("Keeping the reservation of a failed create", "name", rec.Name, "remains", found, "err", err)
		return
	}
	if err := journal.ReleaseRecord(ctx, p, k, rec); err != nil {
		log.Error(err, "Could not give back the reservation of a failed create", "name", rec.Name)
	}
}

// checkSource verifies the content source exists and fits in size.
func checkSource(ctx context.Context, o origin, size uint64) error {
	if o.what == "" {
		return nil
	}
	srcSize, err := o.size(ctx)
	if err != nil {
		return err
	}
	if srcSize > size {
		return status.Errorf(codes.OutOfRange, "requested size %d is smaller than %s (%d bytes)", size, o.what, srcSize)
	}
	return nil
}

func joinFeatures(fs []string) string {
	out := ""
	for i, f := range fs {
		if i > 0 {
			out += ","
		}
		out += f
	}
	return out
}

// compatible checks a repeated request against the reservation it found and returns the size
// the volume was created with. The encryption must match too: a plain volume repeated as an
// encrypted one would otherwise get a LUKS header over its data, and an encrypted one repeated
// as plain (or with another KMS) would be answered with a volume context that cannot stage.
func compatible(rec *journal.Record, req *csi.CreateVolumeRequest, src source, key *classKey) (int64, error) {
	size, err := strconv.ParseInt(rec.Attrs[attrSize], 10, 64)
	if err != nil {
		return 0, status.Errorf(codes.Internal, "journal entry of %q has no valid size", rec.Name)
	}
	if rec.Attrs[attrSource] != src.String() {
		return 0, status.Errorf(codes.AlreadyExists, "volume %q exists with content source %q, not %q", rec.Name, rec.Attrs[attrSource], src.String())
	}
	switch enc, kmsID := rec.Attrs[attrEncryption], rec.Attrs[attrKMSID]; {
	case key == nil && enc != "":
		return 0, status.Errorf(codes.AlreadyExists, "volume %q exists encrypted (KMS %q), the request is for an unencrypted one", rec.Name, kmsID)
	case key != nil && enc == "":
		return 0, status.Errorf(codes.AlreadyExists, "volume %q exists unencrypted, the request is for an encrypted one (monoceph does not encrypt existing data)", rec.Name)
	case key != nil && kmsID != key.kmsID:
		return 0, status.Errorf(codes.AlreadyExists, "volume %q exists encrypted with KMS %q, the request names KMS %q", rec.Name, kmsID, key.kmsID)
	}
	if !volcap.Fits(size, req.GetCapacityRange()) {
		return 0, status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes, outside capacity_range [%d, %d]",
			rec.Name, size, req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes())
	}
	return size, nil
}

// ensureBlank creates the image. fresh says the reservation was made by this call, so the image
// cannot exist yet and probing for it (several RADOS reads in librbd) is skipped.
func ensureBlank(ctx context.Context, p radosop.Location, name string, size uint64, params volumeParams, fresh bool) error {
	_, err := radosop.With(ctx, p, "create image "+name, func(io *rados.IOContext) (struct{}, error) {
		if !fresh {
			st, err := inspect(io, name)
			if err != nil {
				return struct{}{}, err
			}
			if st.exists {
				if st.size < size {
					return struct{}{}, resize(io, name, size)
				}
				return struct{}{}, nil
			}
		}
		opts, err := imageOptions(params.Features, params.DataPool)
		if err != nil {
			return struct{}{}, err
		}
		defer opts.Destroy()
		return struct{}{}, createOrRepair(io, name, func() error { return rbd.CreateImage(io, name, size, opts) })
	})
	return err
}

// cloneFromVolume cuts a transient snapshot of the source volume, clones it and removes the
// snapshot again (with clone v2 it moves to the trash namespace until the clone is flattened or
// deleted). The snapshot is named after the new volume, so a retry finds its own.
func (c *Controller) cloneFromVolume(ctx context.Context, dst radosop.Location, uid string, size uint64, params volumeParams, o origin) error {
	parent := o.loc
	srcName, tmp, child := o.image, rbdname.CloneSnapshot(uid), rbdname.Image(uid)

	done, err := radosop.With(ctx, dst, "inspect clone "+child, func(io *rados.IOContext) (bool, error) {
		st, err := inspect(io, child)
		return st.exists && st.parent != nil, err
	})
	if err != nil {
		return err
	}
	if !done {
		_, err = radosop.With(ctx, parent, "snapshot "+srcName, func(io *rados.IOContext) (struct{}, error) {
			st, err := inspect(io, srcName)
			if err != nil {
				return struct{}{}, err
			}
			if !st.exists || st.deleted {
				return struct{}{}, controller.NotFoundf("%s does not exist", o.what)
			}
			if st.size > size {
				return struct{}{}, status.Errorf(codes.OutOfRange, "requested size %d is smaller than %s (%d bytes)", size, o.what, st.size)
			}
			img, err := rbd.OpenImage(io, srcName, rbd.NoSnapshot)
			if err != nil {
				return struct{}{}, err
			}
			defer img.Close()
			if _, ok := st.hasSnap(tmp); !ok {
				if _, err := img.CreateSnapshot(tmp); err != nil {
					return struct{}{}, err
				}
			}
			// the clone copies the source's DEK record with the snapshot's header: not while
			// a key rotation may be changing either (also for a snapshot a killed call cut)
			return struct{}{}, keyRotationAborts(io, img, img.GetSnapshot(tmp).Remove)
		})
		if err != nil {
			return err
		}
		faultpoint.Hit("rbd.CreateVolume.clone-snapshot")
		if err := c.clone(ctx, parent, srcName, tmp, dst, child, size, params, o.what); err != nil {
			return err
		}
	}
	faultpoint.Hit("rbd.CreateVolume.cloned")
	_, err = radosop.With(ctx, parent, "remove transient snapshot", func(io *rados.IOContext) (struct{}, error) {
		return struct{}{}, removeSnapshot(io, srcName, tmp)
	})
	return err
}

// removeSnapshot removes snap from image; a missing image or snapshot is success.
func removeSnapshot(io *rados.IOContext, image, snap string) error {
	img, err := rbd.OpenImage(io, image, rbd.NoSnapshot)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer img.Close()
	err = img.GetSnapshot(snap).Remove()
	if isNotFound(err) {
		return nil
	}
	return err
}

func (c *Controller) clone(ctx context.Context, parent radosop.Location, parentImage, snap string, dst radosop.Location, child string, size uint64, params volumeParams, what string) error {
	snapSize, err := radosop.With(ctx, parent, "inspect "+what, func(io *rados.IOContext) (uint64, error) {
		st, err := inspect(io, parentImage)
		if err != nil {
			return 0, err
		}
		s, ok := st.hasSnap(snap)
		if !st.exists || !ok {
			return 0, controller.NotFoundf("%s does not exist", what)
		}
		return s.Size, nil
	})
	if err != nil {
		return err
	}
	if snapSize > size {
		return status.Errorf(codes.OutOfRange, "requested size %d is smaller than %s (%d bytes)", size, what, snapSize)
	}
	return c.cloneWith(ctx, parent, dst, child, size, params, func(pio, io *rados.IOContext, opts *rbd.ImageOptions) error {
		return rbd.CloneImage(pio, parentImage, snap, io, child, opts)
	})
}

// cloneWith makes child a clone with create (librbd's clone from a snapshot by name, or by ID),
// unless it is one already, grows it to size and flattens it when its parent chain got too long.
func (c *Controller) cloneWith(ctx context.Context, parent, dst radosop.Location, child string, size uint64, params volumeParams, create func(pio, io *rados.IOContext, opts *rbd.ImageOptions) error) error {
	_, err := ceph.Call(ctx, dst.Conn, "clone "+child, func(r *rados.Conn) (struct{}, error) {
		pio, err := r.OpenIOContext(parent.Pool)
		if err != nil {
			return struct{}{}, err
		}
		defer pio.Destroy()
		pio.SetNamespace(parent.Namespace)
		io, err := r.OpenIOContext(dst.Pool)
		if err != nil {
			return struct{}{}, err
		}
		defer io.Destroy()
		io.SetNamespace(dst.Namespace)

		st, err := inspect(io, child)
		if err != nil {
			return struct{}{}, err
		}
		if st.exists && st.parent == nil {
			// not marked ready, so not flattened by us: librbd creates a clone's header before
			// attaching the parent, and a kill in between leaves an image that is no clone yet
			if err := rbd.RemoveImage(io, child); err != nil && !isNotFound(err) {
				return struct{}{}, err
			}
			st.exists = false
		}
		if !st.exists {
			opts, err := imageOptions(params.Features, params.DataPool)
			if err != nil {
				return struct{}{}, err
			}
			defer opts.Destroy()
			err = createOrRepair(io, child, func() error { return create(pio, io, opts) })
			if err != nil {
				return struct{}{}, err
			}
		}
		// on every pass, not only after creating: a kill between the clone and these steps
		// leaves them to the retry
		err = withImage(io, child, func(img *rbd.Image) error {
			if err := growTo(img, size); err != nil {
				return err
			}
			return dropInherited(img)
		})
		if err != nil {
			return struct{}{}, err
		}
		n, err := depth(r, io, child, c.opts.MaxCloneDepth)
		if err != nil {
			return struct{}{}, err
		}
		if n > c.opts.MaxCloneDepth {
			img, err := rbd.OpenImage(io, child, rbd.NoSnapshot)
			if err != nil {
				return struct{}{}, err
			}
			defer img.Close()
			return struct{}{}, img.Flatten()
		}
		return struct{}{}, nil
	})
	return err
}
