package cephfs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/controller"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/owner"
	"github.com/monoceph/monoceph/internal/volcap"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

const (
	volumePrefix   = "csi-vol-"
	snapshotPrefix = "csi-snap-"
	clonePrefix    = "csi-clone-"
)

func subvolumeName(uid string) string { return volumePrefix + uid }
func snapName(uid string) string      { return snapshotPrefix + uid }
func cloneSnap(uid string) string     { return clonePrefix + uid }

// Journal attributes of a volume reservation.
const (
	attrSize     = "size"
	attrSource   = "source"
	attrGroup    = "group"
	attrPool     = "pool"
	attrKind     = "kind"     // kindSubvolume or kindShallow
	attrRootPath = "rootPath" // set once the subvolume is complete
	attrState    = "state"
	stateReady   = "ready"
	// where a PVC-PVC clone cut its transient snapshot
	attrSrcGroup     = "srcGroup"
	attrSrcSubvolume = "srcSubvolume"

	kindSubvolume = "subvolume"
	kindShallow   = "shallow"
)

// source is a decoded volume_content_source: IDs of either format.
type source = controller.Source[snapshotID, volumeID]

// sourceIDs is the cluster and filesystem a source is on ("", -1 for none).
func sourceIDs(s source) (clusterID string, fscid int64) {
	switch {
	case s.Snap != nil:
		return s.Snap.ClusterID(), s.Snap.Location()
	case s.Vol != nil:
		return s.Vol.ClusterID(), s.Vol.Location()
	}
	return "", -1
}

// fromCephCSI reports whether a source is a ceph-csi volume or snapshot.
func fromCephCSI(s source) bool {
	return s.Snap != nil && s.Snap.CSI != nil || s.Vol != nil && s.Vol.CSI != nil
}

func parseSource(cs *csi.VolumeContentSource) (source, error) {
	return controller.ParseSource(cs, parseSnapshotID, parseVolumeID)
}

// request is a validated CreateVolume.
type request struct {
	req     *csi.CreateVolumeRequest
	params  volumeParams
	cluster v1.Cluster
	size    int64
	src     source
	// shallow: read-only from a snapshot (or a shallow volume), unless backingSnapshot=false
	shallow bool
	pins    pins // from mutable_parameters (a VolumeAttributesClass)
}

func (c *Controller) validateCreate(req *csi.CreateVolumeRequest) (request, error) {
	r := request{req: req}
	if req.GetName() == "" {
		return r, status.Error(codes.InvalidArgument, "name is missing")
	}
	if err := support.Validate(req.GetVolumeCapabilities()); err != nil {
		return r, err
	}
	var err error
	if r.size, err = volcap.Size(req.GetCapacityRange(), c.opts.DefaultSize); err != nil {
		return r, err
	}
	if r.params, err = parseVolumeParams(req.GetParameters(), func(id string) (v1.Cluster, error) {
		return c.Cluster(id, codes.InvalidArgument, `parameters["clusterID"]`)
	}); err != nil {
		return r, err
	}
	r.cluster, _ = c.Clusters.Cluster(r.params.ClusterID)
	if r.src, err = parseSource(req.GetVolumeContentSource()); err != nil {
		return r, err
	}
	if id, _ := sourceIDs(r.src); id != "" && id != r.params.ClusterID {
		return r, status.Errorf(codes.InvalidArgument, "volume_content_source is on cluster %q, the volume would be on %q", id, r.params.ClusterID)
	}
	r.shallow = volcap.ReadOnly(req.GetVolumeCapabilities()) && r.params.BackingSnapshot && r.src.String() != ""
	if r.pins, err = parsePins(req.GetMutableParameters()); err != nil {
		return r, err
	}
	if r.shallow && r.pins != defaultPins {
		return r, status.Error(codes.InvalidArgument, "mutable_parameters: a shallow read-only volume of a snapshot has no subvolume to pin")
	}
	return r, nil
}

// CreateVolume reserves the name, then creates the subvolume (blank, or a clone that the
// volumes module copies asynchronously: ABORTED until it completes, the CO retries).
func (c *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	r, err := c.validateCreate(req)
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "CreateVolume", "cephfs-volume-name:"+req.GetName())
	if err != nil {
		return nil, err
	}
	defer unlock()
	s, err := c.openSite(ctx, r.cluster, req.GetSecrets(), r.params.FSName, -1)
	if errors.Is(err, ceph.ErrNotFound) {
		return nil, classparam.InvalidParam(paramFSName, "filesystem %q does not exist", r.params.FSName)
	}
	if err != nil {
		return nil, err
	}
	defer s.release()
	c.RememberClassUser(req.GetParameters(), req.GetSecrets()) // for GetCapacity
	if _, fscid := sourceIDs(r.src); fscid >= 0 && fscid != s.fs.ID {
		return nil, status.Errorf(codes.InvalidArgument, "volume_content_source is on another filesystem than %q", s.fs.Name)
	}
	if r.shallow {
		b, err := c.backingOf(ctx, s, r.src)
		if err != nil {
			return nil, err
		}
		return c.createShallow(ctx, s, r, b)
	}
	srcInfo, err := c.checkPlacement(ctx, s, r)
	if err != nil {
		return nil, err
	}
	rec, created, err := c.reserveVolume(ctx, s, &r, srcInfo)
	if err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.CreateVolume.reserved")
	if err := c.ensureSubvolume(ctx, s, r, rec, srcInfo); err != nil {
		return nil, err
	}
	if err := c.settleVolume(ctx, s, req, r, rec, created); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Volume ready", "name", req.GetName(), "subvolume", s.fs.Name+"/"+rec.Attrs[attrGroup]+"/"+subvolumeName(rec.UID), "size", r.size, "resumed", !created)
	id := volid.CephFSVolume{ClusterID: r.params.ClusterID, FSCID: s.fs.ID, UID: rec.UID}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      id.String(),
		CapacityBytes: r.size,
		VolumeContext: volumecontext.Volume{ClusterID: r.params.ClusterID, FSName: s.fs.Name, RootPath: rec.Attrs[attrRootPath],
			Mounter: r.params.Mounter, FuseMountOptions: r.params.FuseOptions, KernelMountOptions: r.params.KernelOptions}.Map(),
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

// checkPlacement checks, before anything is reserved, what the volumes module would refuse
// only after the reservation: the pool, the pins and the source.
func (c *Controller) checkPlacement(ctx context.Context, s site, r request) (sourceInfo, error) {
	if err := c.checkPool(ctx, r.cluster, s, r.params.Pool); err != nil {
		return sourceInfo{}, err
	}
	if err := checkPins(ctx, s, r.pins); err != nil {
		return sourceInfo{}, err
	}
	return c.checkSource(ctx, s, r)
}

// reserveVolume reserves the volume's name in the journal. A reservation found again (a
// retried or resumed create) must match the request, and its recorded size wins.
func (c *Controller) reserveVolume(ctx context.Context, s site, r *request, srcInfo sourceInfo) (*journal.Record, bool, error) {
	attrs := map[string]string{
		attrSize: strconv.FormatInt(r.size, 10), attrSource: r.src.String(), attrGroup: r.params.Group,
		attrPool: r.params.Pool, attrKind: kindSubvolume,
	}
	if srcInfo.transient {
		attrs[attrSrcGroup], attrs[attrSrcSubvolume] = srcInfo.group, srcInfo.subvolume
	}
	rec, created, err := journal.Reserve(ctx, s.journal(), journal.Volume, r.req.GetName(), attrs)
	if err != nil {
		return nil, false, err
	}
	if !created {
		if err := compatible(rec, r.req, r.src, kindSubvolume); err != nil {
			return nil, false, err
		}
		r.size, _ = strconv.ParseInt(rec.Attrs[attrSize], 10, 64)
	}
	return rec, created, nil
}

// ensureSubvolume creates the reservation's subvolume unless an earlier attempt made it
// ready, and records its path; a create that fails gives the reservation back.
func (c *Controller) ensureSubvolume(ctx context.Context, s site, r request, rec *journal.Record, srcInfo sourceInfo) error {
	if rec.Attrs[attrState] == stateReady {
		return nil
	}
	group, name := rec.Attrs[attrGroup], subvolumeName(rec.UID)
	if err := c.ensureGroup(r.params.ClusterID, s, group); err != nil {
		return err
	}
	var err error
	switch {
	case r.src.Snap != nil || r.src.Vol != nil:
		err = c.ensureClone(ctx, s, rec, srcInfo, uint64(r.size))
	default:
		err = ceph.Wrap("create subvolume "+name, s.admin.CreateSubVolume(s.fs.Name, group, name,
			&admin.SubVolumeOptions{Size: admin.ByteCount(r.size), PoolLayout: rec.Attrs[attrPool]}))
		if isNotFound(err) { // the group went away behind our cache
			c.forgetGroup(r.params.ClusterID, s, group)
		}
	}
	if err != nil {
		c.giveBack(ctx, s, rec, err)
		return err
	}
	faultpoint.Hit("cephfs.CreateVolume.subvolume")
	path, err := s.admin.SubVolumePath(s.fs.Name, group, name)
	if err != nil {
		return ceph.Wrap("get path of "+name, err)
	}
	rec.Attrs[attrRootPath], rec.Attrs[attrState] = path, stateReady
	return journal.SetAttrs(ctx, s.journal(), journal.Volume, rec)
}

// settleVolume applies the pins and the owner every time, not only for a new subvolume: a
// crash after the create may have come first, and a subvolume the CO was given names its PV.
func (c *Controller) settleVolume(ctx context.Context, s site, req *csi.CreateVolumeRequest, r request, rec *journal.Record, created bool) error {
	group, name := rec.Attrs[attrGroup], subvolumeName(rec.UID)
	if err := c.applyPins(ctx, s, rec, r.pins); err != nil {
		if created && controller.Permanent(err) {
			// nobody was ever given this subvolume: a create that fails for good takes it
			// back with its reservation
			if rerr := s.admin.RemoveSubVolumeWithFlags(s.fs.Name, group, name, admin.SubVolRmFlags{Force: true}); rerr != nil && !isNotFound(rerr) {
				klog.FromContext(ctx).Error(rerr, "Could not remove the subvolume of a failed create", "subvolume", name)
			}
			c.giveBack(ctx, s, rec, err)
		}
		return err
	}
	return c.setOwner(ctx, r.params.ClusterID, s, group, name, "", owner.FromParams(req.GetParameters(), owner.VolumeKeys, c.opts.ClusterName), true)
}

// checkPool checks that a StorageClass's pool is a data pool of the filesystem before anything
// is reserved (the volumes module would refuse the layout only after the reservation).
func (c *Controller) checkPool(ctx context.Context, cl v1.Cluster, s site, pool string) error {
	if pool == "" || slices.Contains(s.fs.DataPools, pool) {
		return nil
	}
	// the cached filesystem map may predate `fs add_data_pool`
	fss, err := c.fss.get(ctx, cl.ClusterID, s.conn, true)
	if err != nil {
		return err
	}
	for _, fs := range fss {
		if fs.ID == s.fs.ID && slices.Contains(fs.DataPools, pool) {
			return nil
		}
	}
	return classparam.InvalidParam(paramPool, "%q is not a data pool of filesystem %q (its data pools: %s)", pool, s.fs.Name, strings.Join(s.fs.DataPools, ", "))
}

// giveBack releases rec, the reservation of a create that failed for good (see
// controller.Permanent), when the volumes module has no subvolume for it; any other failure
// keeps it for the CO's retry, which resumes the create.
func (c *Controller) giveBack(ctx context.Context, s site, rec *journal.Record, cause error) {
	if !controller.Permanent(cause) {
		return
	}
	log := klog.FromContext(ctx)
	_, err := s.admin.SubVolumePath(s.fs.Name, rec.Attrs[attrGroup], subvolumeName(rec.UID))
	if !isNotFound(err) {
		log.V(2).Info("Keeping the reservation of a failed create", "name", rec.Name, "err", err)
		return
	}
	if err := journal.ReleaseRecord(ctx, s.journal(), journal.Volume, rec); err != nil {
		log.Error(err, "Could not give back the reservation of a failed create", "name", rec.Name)
	}
}

// compatible checks a repeated request against the reservation it found.
func compatible(rec *journal.Record, req *csi.CreateVolumeRequest, src source, kind string) error {
	if rec.Attrs[attrKind] != kind {
		return status.Errorf(codes.AlreadyExists, "volume %q exists as a %s volume, not %s", rec.Name, rec.Attrs[attrKind], kind)
	}
	if rec.Attrs[attrSource] != src.String() {
		return status.Errorf(codes.AlreadyExists, "volume %q exists with content source %q, not %q", rec.Name, rec.Attrs[attrSource], src.String())
	}
	size, err := strconv.ParseInt(rec.Attrs[attrSize], 10, 64)
	if err != nil {
		return status.Errorf(codes.Internal, "journal entry of %q has no valid size", rec.Name)
	}
	if kind == kindSubvolume && !volcap.Fits(size, req.GetCapacityRange()) {
		return status.Errorf(codes.AlreadyExists, "volume %q exists with %d bytes, outside capacity_range [%d, %d]",
			rec.Name, size, req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes())
	}
	return nil
}

// sourceInfo is where a clone copies from.
type sourceInfo struct {
	group, subvolume, snapshot string
	size                       int64
	transient                  bool // a snapshot cut for a PVC-PVC clone, removed when it completes
}

// checkSource verifies the content source exists and fits, before anything is reserved.
func (c *Controller) checkSource(ctx context.Context, s site, r request) (sourceInfo, error) {
	switch {
	case fromCephCSI(r.src):
		info, err := c.csiSource(ctx, s, r.src)
		if err != nil {
			return sourceInfo{}, err
		}
		if info.size > r.size {
			return sourceInfo{}, status.Errorf(codes.OutOfRange, "requested size %d is smaller than %s (%d bytes)", r.size, r.src.String(), info.size)
		}
		return info, nil
	case r.src.Snap != nil:
		rec, err := journal.Get(ctx, s.journal(), journal.Snapshot, r.src.Snap.Own.SnapUID)
		if err != nil {
			return sourceInfo{}, err
		}
		if rec == nil || rec.Attrs[attrCreated] == "" {
			return sourceInfo{}, controller.NotFoundf("source snapshot %q does not exist", r.src.Snap.String())
		}
		size, _ := strconv.ParseInt(rec.Attrs[attrSnapSize], 10, 64)
		if size > r.size {
			return sourceInfo{}, status.Errorf(codes.OutOfRange, "requested size %d is smaller than source snapshot %s (%d bytes)", r.size, r.src.Snap.String(), size)
		}
		return sourceInfo{group: rec.Attrs[attrGroup], subvolume: rec.Attrs[attrSubvolume], snapshot: snapName(rec.UID), size: size}, nil
	case r.src.Vol != nil:
		rec, err := journal.Get(ctx, s.journal(), journal.Volume, r.src.Vol.Own.UID)
		if err != nil {
			return sourceInfo{}, err
		}
		if rec == nil || rec.Attrs[attrState] != stateReady {
			return sourceInfo{}, controller.NotFoundf("source volume %q does not exist", r.src.Vol.String())
		}
		if rec.Attrs[attrKind] == kindShallow {
			// a regular volume from a shallow one is a regular volume from its snapshot
			b := backingFromShallow(rec)
			if b.size > r.size {
				return sourceInfo{}, status.Errorf(codes.OutOfRange, "requested size %d is smaller than source volume %s (%d bytes)", r.size, r.src.Vol.String(), b.size)
			}
			return sourceInfo{group: b.group, subvolume: b.subvolume, snapshot: b.snapshot, size: b.size}, nil
		}
		size, _ := strconv.ParseInt(rec.Attrs[attrSize], 10, 64)
		if size > r.size {
			return sourceInfo{}, status.Errorf(codes.OutOfRange, "requested size %d is smaller than source volume %s (%d bytes)", r.size, r.src.Vol.String(), size)
		}
		return sourceInfo{group: rec.Attrs[attrGroup], subvolume: subvolumeName(rec.UID), size: size, transient: true}, nil
	}
	return sourceInfo{}, nil
}

// ensureClone starts the clone if it is not running, and reports its progress: ABORTED while
// the volumes module copies, so the CO retries; nil once complete and grown to size.
func (c *Controller) ensureClone(ctx context.Context, s site, rec *journal.Record, src sourceInfo, size uint64) error {
	fs, group, name := s.fs.Name, rec.Attrs[attrGroup], subvolumeName(rec.UID)
	if src.transient {
		src.snapshot = cloneSnap(rec.UID)
		err := s.admin.CreateSubVolumeSnapshot(fs, src.group, src.subvolume, src.snapshot)
		if err != nil && !ceph.Is(err, ceph.ErrExists) {
			return ceph.Wrap("snapshot source "+src.subvolume, err)
		}
		faultpoint.Hit("cephfs.CreateVolume.clone-snapshot")
	}
	st, err := s.admin.CloneStatus(fs, group, name)
	if isNotFound(err) {
		err = s.admin.CloneSubVolumeSnapshot(fs, src.group, src.subvolume, src.snapshot, name,
			&admin.CloneOptions{TargetGroup: group, PoolLayout: rec.Attrs[attrPool]})
		if err != nil && !ceph.Is(err, ceph.ErrExists) {
			return ceph.Wrap("clone "+src.subvolume+"@"+src.snapshot, err)
		}
		faultpoint.Hit("cephfs.CreateVolume.clone-started")
		st, err = s.admin.CloneStatus(fs, group, name)
	}
	if err != nil {
		return ceph.Wrap("clone status of "+name, err)
	}
	// wait a little, within the RPC's deadline, for a clone that is about to finish
	wait := time.Now().Add(c.opts.CloneWait)
	if dl, ok := ctx.Deadline(); ok && dl.Add(-time.Second).Before(wait) {
		wait = dl.Add(-time.Second)
	}
	for (st.State == admin.ClonePending || st.State == admin.CloneInProgress) && time.Now().Before(wait) {
		select {
		case <-ctx.Done():
			return ceph.Wrap("wait for clone", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
		if st, err = s.admin.CloneStatus(fs, group, name); err != nil {
			return ceph.Wrap("clone status of "+name, err)
		}
	}
	switch st.State {
	case admin.CloneComplete:
	case admin.ClonePending, admin.CloneInProgress:
		return status.Errorf(codes.Aborted, "volume %q is being cloned from %s@%s (%s%s): retry later", rec.Name, src.subvolume, src.snapshot,
			st.State, cloneProgress(st))
	default:
		// failed or canceled: remove the remains so the next retry starts a fresh clone
		reason := string(st.State)
		if f := st.GetFailure(); f != nil {
			reason += ": " + f.ErrStr
		}
		if err := s.admin.RemoveSubVolumeWithFlags(fs, group, name, admin.SubVolRmFlags{Force: true}); err != nil && !isNotFound(err) {
			return ceph.Wrap("remove failed clone "+name, err)
		}
		return status.Errorf(codes.Internal, "cloning volume %q failed (%s); the partial clone was removed and a retry starts over", rec.Name, reason)
	}
	if _, err := s.admin.ResizeSubVolume(fs, group, name, admin.ByteCount(size), true); err != nil {
		return ceph.Wrap("resize "+name, err)
	}
	if src.transient {
		err := s.admin.RemoveSubVolumeSnapshot(fs, src.group, src.subvolume, src.snapshot)
		if err != nil && !isNotFound(err) {
			return ceph.Wrap("remove transient snapshot", err)
		}
	}
	return nil
}

// cloneProgress says how far a clone got where the volumes module reports it (Squid 19.2 and
// later, Tentacle: "progress_report"; Pacific and Reef do not), for the ABORTED message a CO
// shows its user while it retries.
func cloneProgress(st *admin.CloneStatus) string {
	p := st.ProgressReport
	if p.PercentageCloned == "" {
		return ""
	}
	return fmt.Sprintf(", %s copied: %s, %s files", p.PercentageCloned, p.AmountCloned, p.FilesCloned)
}

// DeleteVolume removes the subvolume (keeping its snapshots, which stay usable), then the
// reservation.
func (c *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	vid, err := parseVolumeID(raw)
	if err != nil {
		return &csi.DeleteVolumeResponse{}, nil // names no volume: already deleted
	}
	if vid.CSI != nil {
		return c.deleteCSIVolume(ctx, req, *vid.CSI)
	}
	id := vid.Own
	ctx, s, done, gone, err := c.deletionSite(ctx, "DeleteVolume", "volume_id", id.ClusterID, id.FSCID, raw, req.GetSecrets())
	if err != nil || gone {
		return &csi.DeleteVolumeResponse{}, err
	}
	defer done()
	rec, err := journal.Get(ctx, s.journal(), journal.Volume, id.UID)
	if err != nil || rec == nil {
		return &csi.DeleteVolumeResponse{}, err
	}
	if rec.Attrs[attrKind] == kindShallow {
		if err := c.deleteShallow(ctx, s, rec, raw); err != nil {
			return nil, err
		}
	} else if err := removeSubvolume(s, rec); err != nil {
		return nil, err
	}
	faultpoint.Hit("cephfs.DeleteVolume.subvolume")
	if err := journal.ReleaseRecord(ctx, s.journal(), journal.Volume, rec); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Volume deleted", "volume", raw)
	return &csi.DeleteVolumeResponse{}, nil
}

func removeSubvolume(s site, rec *journal.Record) error {
	fs, group, name := s.fs.Name, rec.Attrs[attrGroup], subvolumeName(rec.UID)
	// a clone that never completed may still be copying (it cannot be removed until stopped),
	// and its PVC-PVC transient snapshot may still be on the source; a ready volume has neither
	if rec.Attrs[attrSource] != "" && rec.Attrs[attrState] != stateReady {
		if err := cancelClone(s, group, name); err != nil {
			return err
		}
		if sub := rec.Attrs[attrSrcSubvolume]; sub != "" {
			err := s.admin.RemoveSubVolumeSnapshot(fs, rec.Attrs[attrSrcGroup], sub, cloneSnap(rec.UID))
			if err != nil && !isNotFound(err) {
				return ceph.Wrap("remove transient snapshot", err)
			}
		}
	}
	return removeSubvolumeRetaining(s, group, name)
}

// cancelClone stops a clone that is still copying into subvolume name: it cannot be removed
// until then.
func cancelClone(s site, group, name string) error {
	st, err := s.admin.CloneStatus(s.fs.Name, group, name)
	if err == nil && (st.State == admin.ClonePending || st.State == admin.CloneInProgress) {
		if err := s.admin.CancelClone(s.fs.Name, group, name); err != nil && !isNotFound(err) {
			return ceph.Wrap("cancel clone "+name, err)
		}
	}
	return nil
}

// removeSubvolumeRetaining removes a subvolume, keeping its snapshots (they stay usable; Ceph
// purges the subvolume with the last of them); a missing one is success.
func removeSubvolumeRetaining(s site, group, name string) error {
	fs := s.fs.Name
	err := s.admin.RemoveSubVolumeWithFlags(fs, group, name, admin.SubVolRmFlags{})
	if ceph.Is(err, ceph.ErrNotEmpty) {
		// snapshots (CSI ones, or a transient one a running clone copies from) must survive:
		// the subvolume goes, its snapshots stay, and Ceph purges it with the last of them
		err = s.admin.RemoveSubVolumeWithFlags(fs, group, name, admin.SubVolRmFlags{RetainSnapshots: true})
	}
	if ceph.Is(err, ceph.ErrBusy) || ceph.Is(err, ceph.ErrUnavailable) {
		err = s.admin.RemoveSubVolumeWithFlags(fs, group, name, admin.SubVolRmFlags{Force: true})
	}
	if err != nil && !isNotFound(err) {
		return ceph.Wrap("remove subvolume "+name, err)
	}
	return nil
}
