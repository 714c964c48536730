package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/oplock"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// Options configure the node service.
type Options struct {
	NodeID string
	// StateDir holds node-private state: per-volume FUSE mount points and, briefly, key
	// files. It is created 0700.
	StateDir string
	Clusters *clustermap.Store
	// Locks serialise operations per volume; a busy volume answers ABORTED.
	Locks *oplock.Locks
	// Timeout bounds each command that attaches, mounts or inspects (rbd, losetup,
	// mount, umount); the driver passes --ceph-op-timeout.
	Timeout time.Duration
	// Pool connects to Ceph as the node-stage credentials: the fuse mounter serves the images
	// it attaches through it (in this process, unless a mount holder does), and stage records
	// this node's client addresses with the volume and checks who else holds the image (see
	// claim). Without it (unit tests) neither happens, and the fuse mounter is unavailable.
	Pool *ceph.Pool
	// FuseAttacher replaces the in-process fuse mounter: the mount holder's (package
	// mounter). Staged fuse volumes then keep a recovery key, and Recover reattaches them.
	FuseAttacher attach.Attacher
	// RecoverBackoff paces Recover's retries (zero: nodereq.DefaultRecoverBackoff).
	RecoverBackoff wait.Backoff
	// FilesystemTimeout bounds each filesystem command (blkid, mkfs, fsck, resize2fs,
	// xfs_growfs, and the mount after them); the driver passes --node-command-timeout. Making,
	// checking or growing the filesystem of a large volume takes far longer than any Ceph
	// operation, and killing it half way helps nobody.
	FilesystemTimeout time.Duration
	// NodeLabels reads this node's labels (its Node object's), which give its CRUSH location
	// where the cluster map asks for read affinity. Nil: no read affinity.
	NodeLabels func(context.Context) (map[string]string, error)
	// Topology is the node's topology segments (--domain-labels), answered by NodeGetInfo;
	// nil: none.
	Topology map[string]string
	// KMS is the KMS configuration (--kms-config): where the keys of encrypted volumes come
	// from. Nil: only the default provider (the node-stage secret's passphrase).
	KMS *kms.Config
}

// Defaults of Options.Timeout and Options.FilesystemTimeout.
const (
	DefaultTimeout           = 30 * time.Second
	DefaultFilesystemTimeout = 2 * time.Minute
)

// Server implements csi.NodeServer for RBD volumes.
type Server struct {
	csi.UnimplementedNodeServer

	opts      Options
	x         hostexec.Executor // bounded by Options.Timeout
	fsx       hostexec.Executor // bounded by Options.FilesystemTimeout
	attachers map[string]attach.Attacher
	// base answers the mount table queries mount-utils makes; mounting goes through x
	base mount.Interface
}

var _ csi.NodeServer = (*Server)(nil)

// New checks opts, creates the state directory and reports which mounters this node offers.
// A mounter the node lacks is not an error here: only volumes that need it fail to stage.
func New(opts Options) (*Server, error) {
	opts.defaults()
	return newServer(opts, hostexec.New(opts.Timeout), hostexec.New(opts.FilesystemTimeout))
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.FilesystemTimeout <= 0 {
		o.FilesystemTimeout = DefaultFilesystemTimeout
	}
}

// newServer is New with the executors of commands (x) and filesystem commands (fsx) given.
func newServer(opts Options, x, fsx hostexec.Executor) (*Server, error) {
	switch {
	case opts.NodeID == "":
		return nil, errors.New("rbd node: a node ID is required")
	case opts.StateDir == "":
		return nil, errors.New("rbd node: a state directory is required")
	case opts.Clusters == nil:
		return nil, errors.New("rbd node: a cluster map is required")
	case opts.Locks == nil:
		return nil, errors.New("rbd node: operation locks are required")
	}
	opts.defaults()
	if err := nodestate.MakeStateDir(opts.StateDir); err != nil {
		return nil, fmt.Errorf("rbd node: state directory: %w", err)
	}
	// half the command timeout: Ceph's own "connection timed out" is a clearer error than the
	// command being killed
	connect := max(opts.Timeout/2, time.Second)
	// a zero Mounter: mount.New would run commands (systemd and umount probes) with no
	// timeout, and its mounting is replaced by boundMounter anyway
	if opts.RecoverBackoff.Duration <= 0 {
		opts.RecoverBackoff = nodereq.DefaultRecoverBackoff
	}
	s := &Server{opts: opts, x: x, fsx: fsx, attachers: attach.Set(x, connect, opts.Pool), base: &mount.Mounter{}}
	if opts.FuseAttacher != nil {
		s.attachers[volumecontext.MounterFuse] = opts.FuseAttacher
	}
	for _, name := range []string{volumecontext.MounterKRBD, volumecontext.MounterNBD, volumecontext.MounterFuse} {
		if err := s.attachers[name].Available(); err != nil {
			klog.InfoS("RBD mounter unavailable; volumes that ask for it will fail to stage", "mounter", name, "reason", err)
		} else {
			klog.InfoS("RBD mounter available", "mounter", name)
		}
	}
	return s, nil
}

// attacher returns the attacher a volume asks for, or FAILED_PRECONDITION naming what the
// node lacks. Availability is checked on every use: a module may have been loaded since.
func (s *Server) attacher(name string) (attach.Attacher, error) {
	a, ok := s.attachers[name]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown mounter %q", name)
	}
	if err := a.Available(); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s: %v", s.opts.NodeID, err)
	}
	return a, nil
}

// pickAttacher is the attacher of a stage request: the mounter the volume asks for or, with
// tryOtherMounters (ceph-csi's volume context key), the one it is staged with already, else
// the first of krbd, rbd-nbd and fuse the node has. It sets r.image.Mounter to the one chosen.
func (s *Server) pickAttacher(r *stageRequest, rec *record) (attach.Attacher, error) {
	if !r.image.TryOtherMounters {
		return s.attacher(r.image.Mounter)
	}
	if rec != nil {
		r.image.Mounter = rec.Mounter
		return s.attacher(rec.Mounter)
	}
	a, err := s.attacher(r.image.Mounter)
	if status.Code(err) != codes.FailedPrecondition {
		return a, err
	}
	for _, m := range volumecontext.Mounters {
		if other, oerr := s.attacher(m); oerr == nil {
			r.image.Mounter = m
			return other, nil
		}
	}
	return nil, status.Errorf(codes.FailedPrecondition, "%s, and no other mounter is available either (tryOtherMounters)", status.Convert(err).Message())
}

// NodeGetInfo implements csi.NodeServer.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	// no volume limit: loop and rbd devices are plentiful; a topology only where
	// --domain-labels asks for one (topologyConstrainedPools): every node reaches every
	// cluster of the map
	resp := &csi.NodeGetInfoResponse{NodeId: s.opts.NodeID, MaxVolumesPerNode: 0}
	if len(s.opts.Topology) > 0 {
		resp.AccessibleTopology = &csi.Topology{Segments: s.opts.Topology}
	}
	return resp, nil
}

// NodeGetCapabilities implements csi.NodeServer.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return nodereq.Capabilities(
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		// CSI 1.13 removed VOLUME_CONDITION (and NodeGetVolumeStats' volume_condition);
		// NodeGetVolumeHealth replaces it
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	), nil
}

// errorStatus converts an error from attaching, mounting or a command into a status.
func errorStatus(what string, err error) error { return nodereq.Status(what, err, errorCode) }

func errorCode(err error) codes.Code {
	var unavailable *attach.UnavailableError
	switch {
	case errors.As(err, &unavailable):
		return codes.FailedPrecondition
	case errors.Is(err, attach.ErrImageNotFound):
		return codes.NotFound
	case errors.Is(err, attach.ErrConnectionLost), errors.Is(err, attach.ErrNoKey):
		return codes.FailedPrecondition
	case errors.Is(err, attach.ErrWrongKey):
		return codes.InvalidArgument
	}
	return ceph.CodeOf(err)
}
