package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/oplock"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// Options configure the node service.
type Options struct {
	NodeID string
	// StateDir is node-private (0700): key files, per-mount admin sockets and logs, recovery
	// keys. Keep it on a tmpfs (under /run) so recovery keys never reach a disk.
	StateDir string
	Clusters *clustermap.Store
	// Locks serialise operations per volume; a busy volume answers ABORTED.
	Locks *oplock.Locks
	// Timeout bounds each mount helper and external command.
	Timeout time.Duration
	// RecoverBackoff paces Recover's retries (zero: nodereq.DefaultRecoverBackoff).
	RecoverBackoff wait.Backoff
	// ResolveCephCSIShallow returns the snapshot one of ceph-csi's shallow volumes exposes,
	// read from ceph-csi's journal with the stage request's credentials (the volume context
	// ceph-csi gave such a volume does not name it). Nil: such volumes cannot be staged.
	ResolveCephCSIShallow func(ctx context.Context, clusterID, volumeID string, cred ceph.Credentials) (string, error)
	// FuseMounter replaces the in-process ceph-fuse mounter: the mount holder's (package
	// mounter), in whose process tree the daemons then run.
	FuseMounter mount.Mounter
}

// DefaultTimeout is Options.Timeout when unset.
const DefaultTimeout = time.Minute

// Server implements csi.NodeServer for CephFS volumes.
type Server struct {
	csi.UnimplementedNodeServer

	opts     Options
	x        hostexec.Executor
	mounters map[string]mount.Mounter
}

var _ csi.NodeServer = (*Server)(nil)

// New checks opts and creates the state directory. A mounter the node lacks is not an error
// here: only volumes that need it fail to stage.
func New(opts Options) (*Server, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	x := hostexec.New(opts.Timeout)
	// half the command timeout: Ceph's own "connection timed out" is a clearer error than the
	// helper being killed
	var fuse mount.Mounter = mount.NewFuse(x, opts.Timeout/2)
	if opts.FuseMounter != nil {
		fuse = opts.FuseMounter
	}
	return newServer(opts, x, fuse, mount.NewKernel(x))
}

func newServer(opts Options, x hostexec.Executor, fuse, kernel mount.Mounter) (*Server, error) {
	switch {
	case opts.NodeID == "":
		return nil, errors.New("cephfs node: a node ID is required")
	case opts.StateDir == "" || !filepath.IsAbs(opts.StateDir):
		return nil, fmt.Errorf("cephfs node: the state directory %q is not an absolute path", opts.StateDir)
	case opts.Clusters == nil:
		return nil, errors.New("cephfs node: a cluster map is required")
	case opts.Locks == nil:
		return nil, errors.New("cephfs node: operation locks are required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RecoverBackoff.Duration <= 0 {
		opts.RecoverBackoff = nodereq.DefaultRecoverBackoff
	}
	opts.StateDir = filepath.Clean(opts.StateDir)
	s := &Server{opts: opts, x: x, mounters: map[string]mount.Mounter{mount.NameFuse: fuse, mount.NameKernel: kernel}}
	// fail at start-up, not at the first FUSE mount, when admin socket paths cannot fit
	if sock := mount.FuseSocket(s.workDir("")); len(sock) > mount.MaxSocketPath {
		return nil, fmt.Errorf("cephfs node: state directory %s is too long: admin sockets in it (%s) exceed %d bytes",
			opts.StateDir, sock, mount.MaxSocketPath)
	}
	if err := nodestate.MakeStateDir(opts.StateDir); err != nil {
		return nil, fmt.Errorf("cephfs node: state directory: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(opts.StateDir, &st); err == nil && st.Type != unix.TMPFS_MAGIC && st.Type != unix.RAMFS_MAGIC {
		klog.InfoS("The CephFS state directory is not on a tmpfs: recovery keys of FUSE mounts are kept on disk while the volumes are staged",
			"stateDir", opts.StateDir)
	}
	return s, nil
}

// mounter returns the mounter a volume asks for: FAILED_PRECONDITION naming it when the node
// lacks it; for "" the kernel client where the node has it, else ceph-fuse. Availability is
// checked on every use: a module may have been loaded since.
func (s *Server) mounter(ctx context.Context, requested string) (mount.Mounter, error) {
	if requested == "" {
		if s.mounters[mount.NameKernel].Available(ctx) == nil {
			return s.mounters[mount.NameKernel], nil
		}
		requested = volumecontext.MounterFuse
	}
	m, ok := s.mounters[requested]
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown mounter %q", requested)
	}
	if err := m.Available(ctx); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s: %v", s.opts.NodeID, err)
	}
	return m, nil
}

// NodeGetInfo implements csi.NodeServer.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	// no volume limit (mounts are cheap) and no topology: every node reaches every cluster
	return &csi.NodeGetInfoResponse{NodeId: s.opts.NodeID}, nil
}

// NodeGetCapabilities implements csi.NodeServer. No EXPAND_VOLUME: a CephFS quota grows on the
// cluster and mounts see it at once. CSI 1.13 removed VOLUME_CONDITION (and NodeGetVolumeStats'
// volume_condition); GET_VOLUME_HEALTH, NodeGetVolumeHealth, replaces it.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return nodereq.Capabilities(
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
	), nil
}

// errorStatus converts an error from mounting or a command into a status naming what failed.
func errorStatus(what string, err error) error { return nodereq.Status(what, err, errorCode) }

func errorCode(err error) codes.Code {
	if errors.Is(err, mount.ErrMounterUnavailable) {
		return codes.FailedPrecondition
	}
	return ceph.CodeOf(err)
}

func internal(what string, err error) error {
	return status.Errorf(codes.Internal, "%s: %v", what, err)
}
