package fence

import (
	"context"
	"net/netip"
	"strconv"
	"time"

	fencepb "github.com/csi-addons/spec/lib/go/fence"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// ClusterIDParameter names the cluster of the map a request is for (as in ceph-csi).
const ClusterIDParameter = "clusterID"

// Clusters looks clusters up by ID; *clustermap.Store is one.
type Clusters interface {
	Cluster(clusterID string) (v1.Cluster, error)
}

// Options configure the FenceController: the blocklist entries it makes, and its RPCs.
type Options struct {
	blocklist.Options
	// ServeFenceClients answers GetFenceClients with this process's own client address;
	// right only for a process that runs on the node whose clients are asked for.
	ServeFenceClients bool
	// Timeout bounds an RPC without a deadline (DefaultTimeout when zero).
	Timeout time.Duration
}

// DefaultTimeout bounds an RPC that arrives without a deadline of its own.
const DefaultTimeout = 2 * time.Minute

// WithDefaults fills in the defaults of the settings left zero, the blocklist's included (it
// shadows blocklist.Options.WithDefaults, which would drop Timeout and ServeFenceClients).
func (o Options) WithDefaults() Options {
	o.Options = o.Options.WithDefaults()
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// Server is the csi-addons FenceController.
type Server struct {
	fencepb.UnimplementedFenceControllerServer
	clusters Clusters
	connect  blocklist.Connector
	locks    *cidrLocks
	opts     Options
}

// NewServer fences the clusters of the map through the pool's connections.
func NewServer(clusters Clusters, pool *ceph.Pool, opts Options) *Server {
	return newServer(clusters, blocklist.PoolConnector(pool), opts)
}

func newServer(clusters Clusters, connect blocklist.Connector, opts Options) *Server {
	return &Server{clusters: clusters, connect: connect, locks: newCIDRLocks(), opts: opts.WithDefaults()}
}

// ServesFenceClients reports whether GetFenceClients is answered (Options.ServeFenceClients).
func (s *Server) ServesFenceClients() bool { return s.opts.ServeFenceClients }

// target is the cluster and credentials of a request.
type target struct {
	id      string
	cluster v1.Cluster
	cred    ceph.Credentials
}

// resolve validates what every request carries; everything wrong is INVALID_ARGUMENT, found
// before the cluster is touched.
func (s *Server) resolve(params, secrets map[string]string) (target, error) {
	id := params[ClusterIDParameter]
	if id == "" {
		return target{}, status.Errorf(codes.InvalidArgument, "parameter %q is required", ClusterIDParameter)
	}
	c, err := s.clusters.Cluster(id)
	if err != nil {
		return target{}, status.Errorf(codes.InvalidArgument, "parameter %s: %v", ClusterIDParameter, err)
	}
	cred, err := ceph.CredentialsFromSecrets(secrets)
	if err != nil {
		return target{}, status.Error(codes.InvalidArgument, err.Error())
	}
	return target{id: id, cluster: c, cred: cred}, nil
}

func cidrStrings(in []*fencepb.CIDR) []string {
	out := make([]string, len(in))
	for i, c := range in {
		out[i] = c.GetCidr()
	}
	return out
}

func parsePrefixes(in []*fencepb.CIDR) ([]netip.Prefix, error) {
	ps, err := blocklist.ParseCIDRs(cidrStrings(in))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return ps, nil
}

// bound gives an RPC without a deadline one; librados' own timeouts bound each command too.
func (s *Server) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// open bounds ctx by the operation timeout and connects to t's cluster; done releases both.
func (s *Server) open(ctx context.Context, t target) (context.Context, blocklist.Cluster, func(), error) {
	ctx, cancel := s.bound(ctx)
	cl, err := s.connect(ctx, t.cluster, t.cred)
	if err != nil {
		cancel()
		return nil, nil, nil, codeFor(err)
	}
	return ctx, cl, func() { cl.Release(); cancel() }, nil
}

// lock serialises operations on overlapping CIDRs of a cluster; a second one gets ABORTED and
// its caller retries.
func (s *Server) lock(op, clusterID string, prefixes []netip.Prefix) (func(), error) {
	return s.locks.tryLock(op, clusterID, prefixes)
}

// codeFor maps an error to the csi-addons error table: Ceph failures that fall in no class are
// UNKNOWN with Ceph's text; classified ones keep their more precise code (UNAUTHENTICATED for
// rejected credentials, UNAVAILABLE, DEADLINE_EXCEEDED...).
func codeFor(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := ceph.CodeOf(err)
	if code == codes.Internal {
		code = codes.Unknown
	}
	return status.Error(code, err.Error())
}

// FenceClusterNetwork blocklists every CIDR of the request.
func (s *Server) FenceClusterNetwork(ctx context.Context, req *fencepb.FenceClusterNetworkRequest) (*fencepb.FenceClusterNetworkResponse, error) {
	t, err := s.resolve(req.GetParameters(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	prefixes, err := parsePrefixes(req.GetCidrs())
	if err != nil {
		return nil, err
	}
	force := false
	if v, ok := req.GetParameters()[blocklist.ForceParameter]; ok {
		if force, err = strconv.ParseBool(v); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "parameter %s=%q: want true or false", blocklist.ForceParameter, v)
		}
	}
	unlock, err := s.lock("FenceClusterNetwork", t.id, prefixes)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ctx, cl, done, err := s.open(ctx, t)
	if err != nil {
		return nil, err
	}
	defer done()
	logger := klog.FromContext(ctx).WithValues("clusterID", t.id, "cidrs", prefixes)
	if force {
		logger.Info("Self-fencing guard overridden by parameter", "parameter", blocklist.ForceParameter)
	} else {
		// the guard's refusals are statuses already, which codeFor keeps
		if err := blocklist.Guard(ctx, cl, t.cluster, prefixes); err != nil {
			return nil, codeFor(err)
		}
	}
	res, err := blocklist.Fence(ctx, cl, s.opts.Options, prefixes)
	if err != nil {
		return nil, codeFor(err)
	}
	logger.Info("Fenced", "entriesAdded", res.Changed, "entriesAlreadyPresent", res.Unchanged,
		"entriesOfOthers", res.Foreign, "expiry", s.opts.Expiry)
	return &fencepb.FenceClusterNetworkResponse{}, nil
}

// UnfenceClusterNetwork removes the entries fencing the request's CIDRs created.
func (s *Server) UnfenceClusterNetwork(ctx context.Context, req *fencepb.UnfenceClusterNetworkRequest) (*fencepb.UnfenceClusterNetworkResponse, error) {
	t, err := s.resolve(req.GetParameters(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	prefixes, err := parsePrefixes(req.GetCidrs())
	if err != nil {
		return nil, err
	}
	unlock, err := s.lock("UnfenceClusterNetwork", t.id, prefixes)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ctx, cl, done, err := s.open(ctx, t)
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := blocklist.Unfence(ctx, cl, s.opts.Options, prefixes)
	if err != nil {
		return nil, codeFor(err)
	}
	// entries nobody recorded (an operator's, another tool's) stay, as do those another CIDR's
	// fence relies on
	klog.FromContext(ctx).Info("Unfenced", "clusterID", t.id, "cidrs", prefixes, "entriesRemoved", res.Changed,
		"entriesOfOthersLeft", res.Foreign, "entriesOfOtherFencesLeft", res.Unchanged)
	return &fencepb.UnfenceClusterNetworkResponse{}, nil
}

// ListClusterFence reports every blocklist entry of the cluster as a CIDR: ranges as they
// are, whole addresses and client instances as /32 or /128, each once.
func (s *Server) ListClusterFence(ctx context.Context, req *fencepb.ListClusterFenceRequest) (*fencepb.ListClusterFenceResponse, error) {
	t, err := s.resolve(req.GetParameters(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	ctx, cl, done, err := s.open(ctx, t)
	if err != nil {
		return nil, err
	}
	defer done()
	listed, err := cl.List(ctx)
	if err != nil {
		return nil, codeFor(err)
	}
	resp := &fencepb.ListClusterFenceResponse{}
	seen := map[netip.Prefix]bool{}
	for _, l := range listed {
		p := l.Prefix.Masked()
		if !seen[p] {
			seen[p] = true
			resp.Cidrs = append(resp.Cidrs, &fencepb.CIDR{Cidr: p.String()})
		}
	}
	return resp, nil
}

// GetFenceClients reports the address this process's Ceph clients reach the cluster from,
// under the cluster's fsid. Only a process running on the node asked about knows it, so a
// controller-only process answers UNIMPLEMENTED (the csi-addons table's "disabled in the
// driver's current mode").
func (s *Server) GetFenceClients(ctx context.Context, req *fencepb.GetFenceClientsRequest) (*fencepb.GetFenceClientsResponse, error) {
	if !s.opts.ServeFenceClients {
		return nil, status.Error(codes.Unimplemented, "GetFenceClients is served only where the node service runs too (--mode=all): its answer is the node's own Ceph client address")
	}
	t, err := s.resolve(req.GetParameters(), req.GetSecrets())
	if err != nil {
		return nil, err
	}
	ctx, cl, done, err := s.open(ctx, t)
	if err != nil {
		return nil, err
	}
	defer done()
	fsid, err := cl.FSID(ctx)
	if err != nil {
		return nil, codeFor(err)
	}
	own, err := cl.ClientAddrs(ctx)
	if err != nil {
		return nil, codeFor(err)
	}
	if len(own) == 0 {
		return nil, status.Error(codes.Unavailable, "librados has not learnt this client's address yet; retry")
	}
	details := &fencepb.ClientDetails{Id: fsid}
	for _, a := range own {
		details.Addresses = append(details.Addresses, &fencepb.CIDR{Cidr: netip.PrefixFrom(a, a.BitLen()).String()})
	}
	return &fencepb.GetFenceClientsResponse{Clients: []*fencepb.ClientDetails{details}}, nil
}
