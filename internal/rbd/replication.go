package rbd

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	identitypb "github.com/csi-addons/spec/lib/go/identity"
	replpb "github.com/csi-addons/spec/lib/go/replication"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"
)

// Replication is the csi-addons replication Controller service of an RBD controller: volume
// replication between two Ceph clusters on RBD mirroring (rbd-mirror daemons on both sites,
// the pool mirrored in image mode and peered). The image keeps its name on both sites, so a
// volume ID resolves on the secondary through its cluster map's rbd.mirrorPeers (the pool ID
// mapped) and finds the image there by the name its UID gives, with no journal entry: RBD
// mirroring copies images, never the RADOS objects of the driver's journal.
type Replication struct {
	replpb.UnimplementedControllerServer
	c *Controller
}

// Replication returns the csi-addons replication service of c.
func (c *Controller) Replication() *Replication { return &Replication{c: c} }

// Register adds the service to a gRPC server.
func (r *Replication) Register(s grpc.ServiceRegistrar) { replpb.RegisterControllerServer(s, r) }

// Capabilities are the service's: volume replication and the destination of a replication
// (the same volume ID, resolved on the other site).
func (*Replication) Capabilities() []*identitypb.Capability {
	c := func(t identitypb.Capability_VolumeReplication_Type) *identitypb.Capability {
		return &identitypb.Capability{Type: &identitypb.Capability_VolumeReplication_{
			VolumeReplication: &identitypb.Capability_VolumeReplication{Type: t}}}
	}
	return []*identitypb.Capability{c(identitypb.Capability_VolumeReplication_VOLUME_REPLICATION),
		c(identitypb.Capability_VolumeReplication_GET_REPLICATION_DESTINATION_INFO)}
}

// Parameters of the VolumeReplicationClass, named as ceph-csi names them.
const (
	paramMirroringMode       = "mirroringMode"
	paramSchedulingInterval  = "schedulingInterval"
	paramSchedulingStartTime = "schedulingStartTime"
	paramForce               = "force"
)

// schedulingIntervalPattern is what the manager's rbd_support module takes: a count of
// minutes, hours or days.
var schedulingIntervalPattern = regexp.MustCompile(`^[1-9][0-9]*[mhd]$`)

// replParams are a request's mirroring parameters, checked before the cluster is touched.
type replParams struct {
	mode      rbd.ImageMirrorMode
	interval  string
	startTime string
}

func parseReplParams(p map[string]string) (replParams, error) {
	rp := replParams{mode: rbd.ImageMirrorModeSnapshot, interval: p[paramSchedulingInterval], startTime: p[paramSchedulingStartTime]}
	switch m := p[paramMirroringMode]; m {
	case "", "snapshot":
	case "journal":
		rp.mode = rbd.ImageMirrorModeJournal
	default:
		return rp, status.Errorf(codes.InvalidArgument, "parameters[%q] %q: want snapshot or journal", paramMirroringMode, m)
	}
	if rp.mode == rbd.ImageMirrorModeJournal && (rp.interval != "" || rp.startTime != "") {
		return rp, status.Errorf(codes.InvalidArgument, "parameters %q and %q apply to snapshot mirroring only", paramSchedulingInterval, paramSchedulingStartTime)
	}
	if rp.interval != "" && !schedulingIntervalPattern.MatchString(rp.interval) {
		return rp, status.Errorf(codes.InvalidArgument, "parameters[%q] %q: want a number of minutes, hours or days (5m, 1h, 1d)", paramSchedulingInterval, rp.interval)
	}
	if rp.startTime != "" && rp.interval == "" {
		return rp, status.Errorf(codes.InvalidArgument, "parameters[%q] needs parameters[%q]", paramSchedulingStartTime, paramSchedulingInterval)
	}
	return rp, nil
}

// forceParam reads the DisableVolumeReplication parameter "force".
func forceParam(p map[string]string) (bool, error) {
	v, ok := p[paramForce]
	if !ok || v == "" {
		return false, nil
	}
	f, err := strconv.ParseBool(v)
	if err != nil {
		return false, status.Errorf(codes.InvalidArgument, "parameters[%q] %q: want true or false", paramForce, v)
	}
	return f, nil
}

// replRequest is what every request of the service carries.
type replRequest interface {
	GetReplicationSource() *replpb.ReplicationSource
	GetSecrets() map[string]string
}

// sourceVolume is the volume ID of a request: its replication source, or the older volume_id
// field. Volume groups are not served: Ceph's consistency-group mirroring is unfinished in the
// releases monoceph supports.
func sourceVolume(req replRequest) (string, error) {
	src := req.GetReplicationSource()
	if src.GetVolumegroup() != nil {
		return "", status.Error(codes.Unimplemented, "volume group replication is not supported: RBD group mirroring is unfinished in the Ceph releases monoceph supports")
	}
	if id := src.GetVolume().GetVolumeId(); id != "" {
		return id, nil
	}
	// the volume_id field the replication source replaced (GetReplicationDestinationInfo
	// never had one)
	if old, ok := req.(interface{ GetVolumeId() string }); ok && old.GetVolumeId() != "" {
		return old.GetVolumeId(), nil
	}
	return "", status.Error(codes.InvalidArgument, "replication_source.volume.volume_id is missing")
}

// replTarget is a request's image, opened under the volume's lock.
type replTarget struct {
	raw   string
	id    volumeID
	loc   radosop.Location
	image string
	mgr   *ceph.Conn // manager commands (snapshot schedules); nil until mgrConn opens it
	// connectMgr opens the manager connection; only schedule and unschedule need one
	connectMgr func(context.Context) (*ceph.Conn, error)
	sendMgr    func(context.Context, map[string]any) error // tests: replaces the manager
	done       func()
}

// mgrConn opens the manager connection on first use: Demote, Resync and the reads never
// need one, and a manager being down must not fail them.
func (t *replTarget) mgrConn(ctx context.Context) (*ceph.Conn, error) {
	if t.mgr == nil {
		conn, err := t.connectMgr(ctx)
		if err != nil {
			return nil, err
		}
		t.mgr = conn
	}
	return t.mgr, nil
}

// open locks the volume and resolves its image (through the cluster map's mirror peers on the
// secondary site). The caller calls done.
func (r *Replication) open(ctx context.Context, op string, req replRequest) (context.Context, *replTarget, error) {
	raw, err := sourceVolume(req)
	if err != nil {
		return ctx, nil, err
	}
	ctx, unlock, err := r.c.opts.Locks.TryLockContext(ctx, op, raw)
	if err != nil {
		return ctx, nil, err
	}
	secrets, err := r.c.publishSecrets(ctx, req.GetSecrets())
	if err != nil {
		unlock()
		return ctx, nil, err
	}
	p, v, _, err := r.c.openVolume(ctx, raw, secrets)
	if err != nil {
		unlock()
		return ctx, nil, err
	}
	t := &replTarget{raw: raw, id: v.id, loc: p, image: v.image}
	t.done = func() {
		if t.mgr != nil {
			t.mgr.Release()
		}
		p.Conn.Release()
		unlock()
	}
	t.connectMgr = func(ctx context.Context) (*ceph.Conn, error) {
		cl, err := r.c.volumeCluster(v.id, codes.NotFound, "volume_id")
		if err != nil {
			return nil, err
		}
		return r.c.ConnectMgr(ctx, cl, secrets)
	}
	return ctx, t, nil
}

// mirrorState is an image's mirroring as librbd reports it.
type mirrorState struct {
	info   rbd.MirrorImageInfo
	mode   rbd.ImageMirrorMode
	status rbd.GlobalMirrorImageStatus
}

// withMirrorImage runs fn on the open image, bounded by ctx.
func withMirrorImage[T any](ctx context.Context, t *replTarget, op string, fn func(*rados.IOContext, *rbd.Image) (T, error)) (T, error) {
	return radosop.With(ctx, t.loc, op, func(io *rados.IOContext) (T, error) {
		var zero T
		img, err := rbd.OpenImage(io, t.image, rbd.NoSnapshot)
		if err != nil {
			return zero, err
		}
		defer img.Close()
		return fn(io, img)
	})
}

func (t *replTarget) state(ctx context.Context, withStatus bool) (mirrorState, error) {
	return withMirrorImage(ctx, t, "mirror state", func(_ *rados.IOContext, img *rbd.Image) (mirrorState, error) {
		var s mirrorState
		info, err := img.GetMirrorImageInfo()
		if err != nil {
			return s, err
		}
		s.info = *info
		if info.State == rbd.MirrorImageEnabled {
			if s.mode, err = img.GetImageMirrorMode(); err != nil {
				return s, err
			}
		}
		if withStatus && info.State == rbd.MirrorImageEnabled {
			s.status, err = img.GetGlobalMirrorStatus()
		}
		return s, err
	})
}

// levelSpec names the image for the manager's schedule commands: pool[/namespace]/image.
func (t *replTarget) levelSpec() string {
	if t.loc.Namespace != "" {
		return t.loc.Pool + "/" + t.loc.Namespace + "/" + t.image
	}
	return t.loc.Pool + "/" + t.image
}

// mgrCommand sends a manager command (through t.sendMgr in tests).
func (t *replTarget) mgrCommand(ctx context.Context, cmd map[string]any) error {
	if t.sendMgr != nil {
		return t.sendMgr(ctx, cmd)
	}
	mgr, err := t.mgrConn(ctx)
	if err != nil {
		return err
	}
	_, err = ceph.MgrCommand(ctx, mgr, cmd)
	return err
}

// schedule sets the image's mirror snapshot schedule to the class's (a no-op when the class
// names none). The manager keeps a list of schedules per image and "add" appends to it, so a
// re-enable or promote with another interval would keep the old one firing too: the image's
// schedules are removed first. Both steps are idempotent, so retries are safe.
func (t *replTarget) schedule(ctx context.Context, rp replParams) error {
	if rp.interval == "" || rp.mode != rbd.ImageMirrorModeSnapshot {
		return nil
	}
	if err := t.unschedule(ctx); err != nil {
		return err
	}
	cmd := map[string]any{"prefix": "rbd mirror snapshot schedule add", "level_spec": t.levelSpec(), "interval": rp.interval}
	if rp.startTime != "" {
		cmd["start_time"] = rp.startTime
	}
	err := t.mgrCommand(ctx, cmd)
	if ceph.Is(err, ceph.ErrInvalid) {
		return status.Errorf(codes.InvalidArgument, "snapshot schedule %s (start %q): %v", rp.interval, rp.startTime, err)
	}
	return err
}

// unschedule removes the image's schedules; none is not an error.
func (t *replTarget) unschedule(ctx context.Context) error {
	err := t.mgrCommand(ctx, map[string]any{"prefix": "rbd mirror snapshot schedule remove", "level_spec": t.levelSpec()})
	if ceph.Is(err, ceph.ErrNotFound) || ceph.Is(err, ceph.ErrInvalid) { // no schedule: ENOENT (or EINVAL on some releases)
		return nil
	}
	return err
}

func notEnabled(raw string, s mirrorState) error {
	return status.Errorf(codes.FailedPrecondition, "volume %s is not mirrored (mirroring state %s): enable replication first", raw, s.info.State)
}

// EnableVolumeReplication enables mirroring of the volume's image in the class's mode and
// adds its snapshot schedule. The pool must be mirrored in image mode and peered (rbd mirror
// pool enable <pool> image; rbd mirror pool peer bootstrap): a pool that is not is
// FAILED_PRECONDITION, never enabled behind the administrator's back.
func (r *Replication) EnableVolumeReplication(ctx context.Context, req *replpb.EnableVolumeReplicationRequest) (*replpb.EnableVolumeReplicationResponse, error) {
	rp, err := parseReplParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	ctx, t, err := r.open(ctx, "EnableVolumeReplication", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := withMirrorImage(ctx, t, "enable mirroring", func(io *rados.IOContext, img *rbd.Image) (mirrorState, error) {
		var s mirrorState
		mode, err := rbd.GetMirrorMode(io)
		if err != nil {
			return s, err
		}
		if mode != rbd.MirrorModeImage {
			return s, status.Errorf(codes.FailedPrecondition, "pool %s is mirrored in mode %s, not image: run `rbd mirror pool enable %s image` and peer the sites", t.loc.Pool, mode, t.loc.Pool)
		}
		info, err := img.GetMirrorImageInfo()
		if err != nil {
			return s, err
		}
		if info.State == rbd.MirrorImageDisabled {
			if err := img.MirrorEnable(rp.mode); err != nil {
				return s, err
			}
			if info, err = img.GetMirrorImageInfo(); err != nil {
				return s, err
			}
		}
		s.info = *info
		if info.State == rbd.MirrorImageEnabled {
			s.mode, err = img.GetImageMirrorMode()
		}
		return s, err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case s.info.State == rbd.MirrorImageDisabling:
		return nil, status.Errorf(codes.Aborted, "volume %s: mirroring is being disabled; retry", t.raw)
	case s.info.State != rbd.MirrorImageEnabled:
		return nil, status.Errorf(codes.Internal, "volume %s: mirroring state %s after enabling", t.raw, s.info.State)
	case s.mode != rp.mode:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is already mirrored in %s mode, not %s", t.raw, s.mode, rp.mode)
	}
	if s.info.Primary {
		if err := t.schedule(ctx, rp); err != nil {
			return nil, err
		}
	}
	klog.FromContext(ctx).V(2).Info("Volume replication enabled", "volumeID", t.raw, "mode", s.mode, "primary", s.info.Primary, "interval", rp.interval)
	return &replpb.EnableVolumeReplicationResponse{}, nil
}

// DisableVolumeReplication disables mirroring of the primary image (the secondary's copy is
// then removed by its rbd-mirror daemon). On a secondary it needs parameters force=true:
// disabling there leaves a standalone copy and never touches the primary.
func (r *Replication) DisableVolumeReplication(ctx context.Context, req *replpb.DisableVolumeReplicationRequest) (*replpb.DisableVolumeReplicationResponse, error) {
	force, err := forceParam(req.GetParameters())
	if err != nil {
		return nil, err
	}
	ctx, t, err := r.open(ctx, "DisableVolumeReplication", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := t.state(ctx, false)
	if err != nil {
		return nil, err
	}
	switch s.info.State {
	case rbd.MirrorImageDisabled:
		return &replpb.DisableVolumeReplicationResponse{}, nil
	case rbd.MirrorImageDisabling:
		return nil, status.Errorf(codes.Aborted, "volume %s: mirroring is being disabled; retry", t.raw)
	}
	if !s.info.Primary && !force {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is a secondary: disable replication on the primary site, or pass parameters force=true to cut this copy loose", t.raw)
	}
	if err := t.unschedule(ctx); err != nil {
		return nil, err
	}
	_, err = withMirrorImage(ctx, t, "disable mirroring", func(_ *rados.IOContext, img *rbd.Image) (struct{}, error) {
		return struct{}{}, img.MirrorDisable(!s.info.Primary)
	})
	if err != nil {
		return nil, err
	}
	return &replpb.DisableVolumeReplicationResponse{}, nil
}

// PromoteVolume makes the volume's image primary on this site. A secondary whose peer is still
// primary (or unreachable) is refused by librbd with EBUSY or EINVAL, and one whose peer's
// demotion has not reached it yet with EROFS: promoteRefused answers UNAVAILABLE while the peer
// is reachable (the CO retries) and FAILED_PRECONDITION when it is not; force=true promotes it
// anyway (a lost primary site; the old primary must be demoted and resynced when it returns,
// see ResyncVolume).
func (r *Replication) PromoteVolume(ctx context.Context, req *replpb.PromoteVolumeRequest) (*replpb.PromoteVolumeResponse, error) {
	rp, err := parseReplParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	ctx, t, err := r.open(ctx, "PromoteVolume", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := t.state(ctx, false)
	if err != nil {
		return nil, err
	}
	if s.info.State != rbd.MirrorImageEnabled {
		return nil, notEnabled(t.raw, s)
	}
	if !s.info.Primary {
		_, err = withMirrorImage(ctx, t, "promote", func(_ *rados.IOContext, img *rbd.Image) (struct{}, error) {
			return struct{}{}, img.MirrorPromote(req.GetForce())
		})
		if ceph.Is(err, ceph.ErrBusy) || ceph.Is(err, ceph.ErrInvalid) || ceph.Errno(err) == -int(syscall.EROFS) {
			g, serr := t.state(ctx, true)
			if serr != nil {
				return nil, serr
			}
			return nil, promoteRefused(t.raw, g.status, err)
		}
		if err != nil {
			return nil, err
		}
		klog.FromContext(ctx).V(2).Info("Volume promoted", "volumeID", t.raw, "force", req.GetForce())
	}
	if err := t.schedule(ctx, rp); err != nil {
		return nil, err
	}
	return &replpb.PromoteVolumeResponse{}, nil
}

// promoteRefused answers a promotion librbd refused (the image's last mirror snapshot is not
// a demoted primary's, fully copied). csi-addons force-promotes on FAILED_PRECONDITION
// (volumePromotionKnownErrors), as ceph-csi means it for a lost primary site; a force while
// the peer is alive makes a split brain. So a peer site whose rbd-mirror daemon reports the
// image and is up (the peer is reachable: still primary, or its demotion is on the way) is
// UNAVAILABLE, and the CO retries without force; with no peer reporting up, the primary is
// unreachable and FAILED_PRECONDITION asks for the force.
func promoteRefused(raw string, g rbd.GlobalMirrorImageStatus, err error) error {
	for _, site := range g.SiteStatuses {
		if site.MirrorUUID != "" && site.Up {
			return status.Errorf(codes.Unavailable, "volume %s cannot be promoted yet: its peer is reachable and still primary, or its demotion has not been copied here yet (%s: %s): %v", raw, site.State, site.Description, err)
		}
	}
	return status.Errorf(codes.FailedPrecondition, "volume %s cannot be promoted: it is not demoted on a reachable peer (no peer site reports it up); promote with force for a lost site: %v", raw, err)
}

// DemoteVolume makes the volume's image secondary on this site, and the peer can then be
// promoted without force. librbd demotes an image even while a client writes to it, and that
// client's next writes fail with EROFS: a filesystem on it loses what it had not written back.
// So a volume still published to a node (ControllerPublishVolume's record) is refused with
// FAILED_PRECONDITION unless the request says force.
func (r *Replication) DemoteVolume(ctx context.Context, req *replpb.DemoteVolumeRequest) (*replpb.DemoteVolumeResponse, error) {
	ctx, t, err := r.open(ctx, "DemoteVolume", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := t.state(ctx, false)
	if err != nil {
		return nil, err
	}
	if s.info.State != rbd.MirrorImageEnabled {
		return nil, notEnabled(t.raw, s)
	}
	if s.info.Primary && !req.GetForce() {
		st, err := attachment.Read(ctx, t.loc, attachment.KeyOf(t.id))
		if err != nil {
			return nil, err
		}
		if nodes := st.Nodes(); len(nodes) > 0 {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is still published to %v: stop its workload (unpublish it) before demoting, or demote with force (its writers then fail with EROFS)", t.raw, nodes)
		}
	}
	if s.info.Primary {
		_, err = withMirrorImage(ctx, t, "demote", func(_ *rados.IOContext, img *rbd.Image) (struct{}, error) {
			return struct{}{}, img.MirrorDemote()
		})
		if err != nil {
			return nil, err
		}
		klog.FromContext(ctx).V(2).Info("Volume demoted", "volumeID", t.raw)
	}
	return &replpb.DemoteVolumeResponse{}, nil
}

// ResyncVolume repairs a secondary that split from the primary (both were primary for a
// while: a force promote on the other site): its image is flagged for resync, which makes the
// local rbd-mirror daemon replace it with a full copy of the primary. force=true flags a
// secondary whose daemon is stopped or has not reported too, never one that replays (see
// resyncDecision). Ready reports that the secondary replays the primary and is caught up; the
// CO calls again until it is.
func (r *Replication) ResyncVolume(ctx context.Context, req *replpb.ResyncVolumeRequest) (*replpb.ResyncVolumeResponse, error) {
	ctx, t, err := r.open(ctx, "ResyncVolume", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := t.state(ctx, true)
	if ceph.Is(err, ceph.ErrNotFound) {
		// the daemon removed the image to copy it again: not there yet
		return nil, status.Errorf(codes.Aborted, "volume %s is being resynced: %v", t.raw, err)
	}
	if err != nil {
		return nil, err
	}
	if s.info.State != rbd.MirrorImageEnabled && s.info.State != rbd.MirrorImageDisabled {
		// the copy the daemon makes again reports no mirroring state for a moment (seen: a
		// state librbd's enum does not name)
		return nil, status.Errorf(codes.Aborted, "volume %s is being resynced (mirroring state %s)", t.raw, s.info.State)
	}
	if s.info.State != rbd.MirrorImageEnabled {
		return nil, notEnabled(t.raw, s)
	}
	if s.info.Primary {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is primary here: demote it before resyncing it from its peer", t.raw)
	}
	local, lerr := s.status.LocalStatus()
	flag, ready := resyncDecision(local, lerr, req.GetForce())
	if flag {
		_, err = withMirrorImage(ctx, t, "resync", func(_ *rados.IOContext, img *rbd.Image) (struct{}, error) {
			return struct{}{}, img.MirrorResync()
		})
		if err != nil {
			return nil, err
		}
		klog.FromContext(ctx).V(2).Info("Volume resync requested", "volumeID", t.raw, "force", req.GetForce(), "state", local.State, "description", local.Description)
	}
	return &replpb.ResyncVolumeResponse{Ready: ready}, nil
}

// resyncDecision says whether a ResyncVolume flags the image for resync and whether the
// secondary is ready. csi-addons calls ResyncVolume on every reconcile of a secondary (force
// set by autoResync) and always with force in its Resync state until Ready, so flagging on
// every forced call would make the daemon recreate the image forever: a secondary whose daemon
// already (re)starts, copies or replays the primary without error is never flagged, force or
// not; a split-brain or error is flagged (again while the daemon has not picked the flag up:
// flagging is idempotent); other states (no status yet, unknown, stopping, stopped: the daemon
// is down or between states) are flagged only with force. The image being recreated after a
// flag is answered Aborted before this.
func resyncDecision(local rbd.SiteMirrorImageStatus, lerr error, force bool) (flag, ready bool) {
	if lerr != nil {
		return false, false // the local daemon has reported nothing yet
	}
	if local.State == rbd.MirrorImageStatusStateError || strings.Contains(local.Description, "split-brain") {
		return true, false
	}
	switch local.State {
	case rbd.MirrorImageStatusStateStartingReplay, rbd.MirrorImageStatusStateSyncing, rbd.MirrorImageStatusStateReplaying:
		return false, caughtUp(local)
	}
	return force, false
}

// caughtUp: the secondary's daemon is up, replaying, and idle (its last mirror snapshot is
// copied).
func caughtUp(local rbd.SiteMirrorImageStatus) bool {
	if !local.Up || local.State != rbd.MirrorImageStatusStateReplaying {
		return false
	}
	rs, err := local.DescriptionReplayStatus()
	return err == nil && rs.ReplayState == "idle"
}

// GetVolumeReplicationInfo reports, on the primary, when the peer last finished copying a
// mirror snapshot (the recovery point), how long that copy took and how many bytes it moved.
func (r *Replication) GetVolumeReplicationInfo(ctx context.Context, req *replpb.GetVolumeReplicationInfoRequest) (*replpb.GetVolumeReplicationInfoResponse, error) {
	ctx, t, err := r.open(ctx, "GetVolumeReplicationInfo", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := t.state(ctx, true)
	if err != nil {
		return nil, err
	}
	if s.info.State != rbd.MirrorImageEnabled {
		return nil, notEnabled(t.raw, s)
	}
	if !s.info.Primary {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is a secondary here: replication info is reported by the primary site", t.raw)
	}
	return replicationInfo(t.raw, s.status)
}

// replicationInfo reads the peer sites' statuses (the ones with a mirror UUID: the local
// site's has none). The peer's daemon reports the timestamp of the last mirror snapshot it
// copied as local_snapshot_timestamp.
func replicationInfo(raw string, g rbd.GlobalMirrorImageStatus) (*replpb.GetVolumeReplicationInfoResponse, error) {
	for _, site := range g.SiteStatuses {
		if site.MirrorUUID == "" {
			continue
		}
		resp := &replpb.GetVolumeReplicationInfoResponse{Status: replpb.GetVolumeReplicationInfoResponse_HEALTHY, StatusMessage: site.Description}
		switch {
		case site.State == rbd.MirrorImageStatusStateError:
			resp.Status = replpb.GetVolumeReplicationInfoResponse_ERROR
		case !site.Up || site.State != rbd.MirrorImageStatusStateReplaying:
			resp.Status = replpb.GetVolumeReplicationInfoResponse_DEGRADED
		}
		rs, err := site.DescriptionReplayStatus()
		if err != nil || rs.LocalSnapshotTimestamp == 0 {
			// no replay status (split-brain, error, stopped) or nothing copied yet: the state
			// and message still tell the CO what is wrong (csi-addons drops a NOT_FOUND answer)
			if resp.Status == replpb.GetVolumeReplicationInfoResponse_HEALTHY {
				resp.Status = replpb.GetVolumeReplicationInfoResponse_DEGRADED
			}
			return resp, nil
		}
		resp.LastSyncTime = timestamppb.New(time.Unix(rs.LocalSnapshotTimestamp, 0))
		resp.LastSyncDuration = durationpb.New(time.Duration(rs.LastSnapshotSyncSeconds) * time.Second)
		resp.LastSyncBytes = rs.LastSnapshotBytes
		return resp, nil
	}
	return nil, status.Errorf(codes.NotFound, "volume %s: no peer site has reported its mirroring status yet", raw)
}

// GetReplicationDestinationInfo names the volume on the other site: the same volume ID,
// which the other site's cluster map resolves (rbd.mirrorPeers).
func (r *Replication) GetReplicationDestinationInfo(ctx context.Context, req *replpb.GetReplicationDestinationInfoRequest) (*replpb.GetReplicationDestinationInfoResponse, error) {
	ctx, t, err := r.open(ctx, "GetReplicationDestinationInfo", req)
	if err != nil {
		return nil, err
	}
	defer t.done()
	s, err := t.state(ctx, false)
	if err != nil {
		return nil, err
	}
	if s.info.State != rbd.MirrorImageEnabled {
		return nil, notEnabled(t.raw, s)
	}
	return &replpb.GetReplicationDestinationInfoResponse{ReplicationDestination: &replpb.ReplicationDestination{
		Type: &replpb.ReplicationDestination_Volume{Volume: &replpb.ReplicationDestination_VolumeDestination{VolumeId: t.raw}}}}, nil
}
