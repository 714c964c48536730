// Package nodefence fences lost nodes automatically. When a node gets the
// node.kubernetes.io/out-of-service taint (an administrator's statement that the node is down,
// after which Kubernetes force-detaches its volumes), the elected fencer blocklists the Ceph
// client addresses the node's plugin used, and for CephFS evicts the node's MDS sessions; when
// the taint goes, it removes the entries it added, and no others.
//
// Watching is done with informers (nodes, and what the backend needs); each node is reconciled
// from scratch by a work queue, from its taint and the record the fencer keeps for it in a
// ConfigMap, so a fencer restarted half way (or a new leader) converges on the same result.
// The record is written before the blocklist is changed: it notes which entries existed
// already (a NetworkFence's, an operator's), which unfencing leaves alone, as it leaves the
// CIDRs of NetworkFences that are fenced now.
package nodefence

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/faultpoint"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Backend knows a driver's clients.
type Backend interface {
	// Clients are the Ceph client addresses node's plugin uses, per cluster ID. With an error
	// (a cluster or volume it could not read) the map holds what was found all the same.
	Clients(ctx context.Context, node string) (map[string][]netip.Addr, error)
	// Cut ends, once addrs are blocklisted on the cluster, what the blocklist alone does not
	// end at once (CephFS: the node's MDS sessions, whose capabilities others wait for).
	Cut(ctx context.Context, clusterID, node string, addrs []netip.Addr) error
	// Watch registers the informers the backend reads; enqueue(node) asks for node to be
	// reconciled because its clients may have changed.
	Watch(f informers.SharedInformerFactory, enqueue func(node string))
}

// Options configure the fencer.
type Options struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface // reads NetworkFences; nil: none are considered
	Driver  string
	// Namespace holds the leader election Lease and the state ConfigMap, both named after the
	// driver.
	Namespace string
	Identity  string // this replica, for leader election
	Backend   Backend
	Fencers   Fencers
	// NodeNetworks are the ranges nodes reach Ceph from: an address there counts as the
	// tainted node's unless another Node reports it (besides the addresses the Node reports).
	NodeNetworks []netip.Prefix

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Resync re-reconciles every node this often (informer resync), in case a change was
	// missed while no replica led.
	Resync time.Duration
}

// OutOfService is the taint an administrator puts on a node that is down (KEP-2268).
const OutOfService = corev1.TaintNodeOutOfService

// Fencer is the controller.
type Fencer struct {
	opts   Options
	state  store
	queue  workqueue.TypedRateLimitingInterface[string]
	nodes  corelisters.NodeLister
	events record.EventRecorder
}

// New checks opts and builds the fencer; Run starts it.
func New(o Options) (*Fencer, error) {
	switch {
	case o.Kube == nil || o.Backend == nil || o.Fencers == nil:
		return nil, errors.New("fencing needs the Kubernetes API, a backend and Ceph credentials")
	case o.Namespace == "" || o.Driver == "" || o.Identity == "":
		return nil, errors.New("fencing needs a namespace, the driver name and an identity")
	}
	if o.LeaseDuration <= 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 137*time.Second, 107*time.Second, 26*time.Second
	}
	if o.Resync <= 0 {
		o.Resync = 10 * time.Minute
	}
	return &Fencer{opts: o, state: store{kc: o.Kube, namespace: o.Namespace, name: o.Driver + "-fencing"}}, nil
}

// Run takes part in leader election until ctx ends; the leader reconciles.
func (f *Fencer) Run(ctx context.Context) {
	log := klog.FromContext(ctx).WithValues("controller", "out-of-service fencing")
	ctx = klog.NewContext(ctx, log)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: f.opts.Driver + "-fencer", Namespace: f.opts.Namespace},
		Client:     f.opts.Kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: f.opts.Identity},
	}
	// a lost lease ends this round; the replica then stands for election again
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, Name: lock.LeaseMeta.Name, ReleaseOnCancel: true,
			LeaseDuration: f.opts.LeaseDuration, RenewDeadline: f.opts.RenewDeadline, RetryPeriod: f.opts.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: f.lead,
				OnStoppedLeading: func() { log.Info("Not leading") },
			},
		})
	}
}

// lead runs the informers and the queue while this replica leads.
func (f *Fencer) lead(ctx context.Context) {
	log := klog.FromContext(ctx)
	log.Info("Leading: watching nodes for the out-of-service taint")
	factory := informers.NewSharedInformerFactory(f.opts.Kube, f.opts.Resync)
	f.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 2*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: f.opts.Driver + "-fencer"})
	defer f.queue.ShutDown()
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: f.opts.Kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	f.events = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: f.opts.Driver + "-fencer"})

	nodes := factory.Core().V1().Nodes()
	f.nodes = nodes.Lister()
	_, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { f.enqueueObj(o) },
		UpdateFunc: func(old, cur any) {
			if tainted(old.(*corev1.Node)) != tainted(cur.(*corev1.Node)) {
				f.enqueueObj(cur)
			}
		},
		DeleteFunc: func(o any) { f.enqueueObj(o) },
	})
	if err != nil {
		log.Error(err, "Watching nodes")
		return
	}
	f.opts.Backend.Watch(factory, f.queue.Add)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return
	}
	for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return
		}
	}
	// nodes fenced earlier whose Node objects are gone get no informer event
	if recorded, err := f.state.nodes(ctx); err == nil {
		for _, n := range recorded {
			f.queue.Add(n)
		}
	} else {
		log.Error(err, "Reading the fencing state")
	}
	go wait.UntilWithContext(ctx, f.work, time.Second)
	<-ctx.Done()
}

func (f *Fencer) enqueueObj(o any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
		f.queue.Add(key)
	}
}

func (f *Fencer) work(ctx context.Context) {
	for {
		node, quit := f.queue.Get()
		if quit {
			return
		}
		err := f.reconcile(ctx, node)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Fencing", "node", node, "retries", f.queue.NumRequeues(node))
			f.queue.AddRateLimited(node)
		} else {
			f.queue.Forget(node)
		}
		f.queue.Done(node)
	}
}

func tainted(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == OutOfService })
}

// reconcile fences a tainted node's clients, or lifts the fence of a node that is no longer
// tainted. A node whose Node object is gone stays fenced: the machine may still run. A node
// whose record does not validate is left as it is, and reported.
func (f *Fencer) reconcile(ctx context.Context, name string) error {
	log := klog.FromContext(ctx).WithValues("node", name)
	ctx = klog.NewContext(ctx, log)
	node, err := f.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		if rec, err := f.state.load(ctx, name); err == nil && rec != nil {
			log.Info("Fenced node was deleted; its addresses stay fenced until a node of that name is back without the taint")
		}
		return nil
	}
	if err != nil {
		return err
	}
	rec, err := f.state.load(ctx, name)
	if invalid := (*InvalidRecordError)(nil); errors.As(err, &invalid) {
		f.events.Eventf(node, corev1.EventTypeWarning, "FenceStateInvalid", "%s: neither fencing nor unfencing the node: %v", f.opts.Driver, err)
		return err // retried, in case somebody mends the record
	}
	if err != nil {
		return err
	}
	if !tainted(node) {
		if rec == nil {
			return nil
		}
		return f.unfence(ctx, node, rec)
	}
	return f.fence(ctx, node, rec)
}

// fence fences what the backend found of the node's clients, also when it could not find all
// (an unreachable cluster, a volume it could not read): the rest is reported and retried.
func (f *Fencer) fence(ctx context.Context, node *corev1.Node, rec *Record) error {
	log := klog.FromContext(ctx)
	var errs []error
	clients, err := f.opts.Backend.Clients(ctx, node.Name)
	if err != nil {
		errs = append(errs, fmt.Errorf("finding the node's clients: %w", err))
		f.events.Eventf(node, corev1.EventTypeWarning, "FenceIncomplete",
			"%s: not all of the node's Ceph clients could be found; fencing those that were, and retrying: %v", f.opts.Driver, err)
	}
	attr, err := f.attribution(node)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if rec == nil {
		rec = &Record{Clusters: map[string]*ClusterRecord{}}
	}
	for _, id := range sortedKeys(clients, rec) {
		cr := rec.Clusters[id]
		if cr == nil {
			cr = &ClusterRecord{}
			rec.Clusters[id] = cr
		}
		found, drop := attr.split(clients[id])
		// an address recorded earlier may be another Node's by now
		_, stale := attr.split(prefixAddrs(cr.CIDRs))
		f.reportDropped(ctx, node, id, append(drop, stale...))
		if err := f.fenceCluster(ctx, node, rec, id, cr, found, attr); err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", id, err))
		}
	}
	if len(rec.Clusters) == 0 && len(errs) == 0 {
		log.Info("Out-of-service node has no recorded Ceph clients; nothing to fence")
	}
	return errors.Join(errs...)
}

// attribution ties addresses to node and the other Nodes of the cluster.
func (f *Fencer) attribution(node *corev1.Node) (*attribution, error) {
	all, err := f.nodes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return newAttribution(node, all, f.opts.NodeNetworks), nil
}

// reportDropped logs and reports (an event on the Node) the addresses not fenced because they
// are not the node's.
func (f *Fencer) reportDropped(ctx context.Context, node *corev1.Node, id string, ds []dropped) {
	if len(ds) == 0 {
		return
	}
	klog.FromContext(ctx).Info("Not fencing client addresses that are not the node's", "clusterID", id, "dropped", droppedList(ds))
	f.events.Eventf(node, corev1.EventTypeWarning, "FenceAddressRefused",
		"%s: not fencing addresses recorded for the node on cluster %s: %s", f.opts.Driver, id, droppedList(ds))
}

// fenceCluster fences the node's CIDRs on one cluster (those attr still ties to it). Before
// the blocklist changes, the record notes the CIDRs and which of them somebody else fenced
// already; a pre-existing entry that vanished since is dropped from that list, since this
// fencer is about to make it.
func (f *Fencer) fenceCluster(ctx context.Context, node *corev1.Node, rec *Record, id string, cr *ClusterRecord, addrs []netip.Addr, attr *attribution) error {
	d, release, err := f.opts.Fencers(ctx, id)
	if err != nil {
		return err
	}
	defer release()
	added := cr.add(addrs)
	present, err := d.Present(ctx, cr.CIDRs)
	if err != nil {
		return err
	}
	pre := slices.DeleteFunc(slices.Clone(cr.Preexisting), func(p netip.Prefix) bool { return !slices.Contains(present, p) })
	for _, p := range added {
		if slices.Contains(present, p) {
			pre = append(pre, p)
		}
	}
	if len(added) > 0 || !slices.Equal(pre, cr.Preexisting) {
		cr.Preexisting = pre
		if err := f.state.save(ctx, node.Name, rec); err != nil {
			return err
		}
		faultpoint.Hit("nodefence.recorded")
	}
	keep, _ := attr.split(prefixAddrs(cr.CIDRs))
	targets := addrPrefixes(keep)
	if len(targets) == 0 {
		return nil
	}
	if err := d.Guard(ctx, targets); err != nil {
		if cr.Refused != err.Error() {
			cr.Refused = err.Error()
			f.events.Eventf(node, corev1.EventTypeWarning, "FenceRefused", "%s: not fencing %v on cluster %s: %v", f.opts.Driver, targets, id, err)
			if err := f.state.save(ctx, node.Name, rec); err != nil {
				return err
			}
		}
		return nil // retrying cannot help; a change of the node or its clients requeues it
	}
	made, err := d.Fence(ctx, targets)
	if err != nil {
		return err
	}
	faultpoint.Hit("nodefence.fenced")
	if err := f.opts.Backend.Cut(ctx, id, node.Name, keep); err != nil {
		return err
	}
	if made > 0 || cr.Refused != "" {
		cr.Refused = ""
		if err := f.state.save(ctx, node.Name, rec); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Fenced out-of-service node", "clusterID", id, "cidrs", targets, "entriesAdded", made)
		f.events.Eventf(node, corev1.EventTypeNormal, "Fenced", "%s: blocklisted the node's Ceph clients %v on cluster %s", f.opts.Driver, targets, id)
	}
	return nil
}

var networkFences = schema.GroupVersionResource{Group: "csiaddons.openshift.io", Version: "v1alpha1", Resource: "networkfences"}

// networkFenced are the CIDRs NetworkFence resources keep fenced on a cluster now: the
// blocklist entries they share with this fencer must stay.
func (f *Fencer) networkFenced(ctx context.Context, clusterID string) ([]netip.Prefix, error) {
	if f.opts.Dynamic == nil {
		return nil, nil
	}
	list, err := f.opts.Dynamic.Resource(networkFences).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) || meta404(err) {
		return nil, nil // the csi-addons CRDs are not installed
	}
	if err != nil {
		return nil, fmt.Errorf("listing NetworkFences: %w", err)
	}
	var out []netip.Prefix
	for _, nf := range list.Items {
		spec, _ := nf.Object["spec"].(map[string]any)
		params, _ := spec["parameters"].(map[string]any)
		if spec["fenceState"] != "Fenced" || params["clusterID"] != clusterID {
			continue
		}
		cidrs, _ := spec["cidrs"].([]any)
		for _, c := range cidrs {
			if s, ok := c.(string); ok {
				if p, err := blocklist.ParseCIDR(s); err == nil {
					out = append(out, p)
				}
			}
		}
	}
	return out, nil
}

// meta404 recognises the discovery error of a resource whose CRD is missing.
func meta404(err error) bool {
	return err != nil && strings.Contains(err.Error(), "the server could not find the requested resource")
}

func prefixAddrs(ps []netip.Prefix) []netip.Addr {
	out := make([]netip.Addr, len(ps))
	for i, p := range ps {
		out[i] = p.Addr()
	}
	return out
}

func addrPrefixes(as []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, len(as))
	for i, a := range as {
		out[i] = netip.PrefixFrom(a, a.BitLen())
	}
	return out
}

// sortedKeys are the cluster IDs of clients and rec, in order.
func sortedKeys(clients map[string][]netip.Addr, rec *Record) []string {
	var ids []string
	for id := range clients {
		ids = append(ids, id)
	}
	if rec != nil {
		for id := range rec.Clusters {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
