package nodefence

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/childtest"
	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
)

const testDriver = "rbd.fencetest.monoceph.io"

// childEnv carries what TestFencerChild needs: the kubeconfig of the test's control plane.
const childEnv = "MONOCEPH_FENCER_CHILD"

// rig is a control plane, the local Ceph cluster and an admin connection.
type rig struct {
	t    *testing.T
	cl   cephtest.Cluster
	kc   kubernetes.Interface
	dyn  dynamic.Interface
	conn *ceph.Conn
	pool *ceph.Pool
	ctx  context.Context
}

func newRig(t *testing.T, kubeconfig string) *rig {
	cl := cephtest.Env(t)
	r := &rig{t: t, cl: cl}
	if kubeconfig == "" {
		cp := kubetest.Start(t, kubetest.Options{})
		kubeconfig = cp.Kubeconfig(t, cp.AdminToken)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	r.kc, r.dyn = kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	r.ctx = ctx
	r.pool = ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(r.pool.Close)
	if r.conn, err = r.pool.Get(ctx, cl.Monitors, cl.Admin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.conn.Release)
	return r
}

// fencer builds a fencer of testDriver with the admin's credentials and quick leases.
func (r *rig) fencer(backend Backend) *Fencer {
	f, err := New(Options{Kube: r.kc, Dynamic: r.dyn, Driver: testDriver, Namespace: "default", Identity: "test-" + fmt.Sprint(os.Getpid()),
		Backend: backend, Fencers: r.fencers, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second})
	if err != nil {
		r.t.Fatal(err)
	}
	return f
}

func (r *rig) connect(ctx context.Context, clusterID string) (*ceph.Conn, error) {
	if clusterID != r.cl.ID {
		return nil, fmt.Errorf("unknown cluster %q", clusterID)
	}
	return r.pool.Get(ctx, r.cl.Monitors, r.cl.Admin)
}

func (r *rig) fencers(ctx context.Context, clusterID string) (Blocklist, func(), error) {
	conn, err := r.connect(ctx, clusterID)
	if err != nil {
		return nil, nil, err
	}
	return blocklist.NewDirect(conn, r.cl.ClusterMap()[0], blocklist.Options{Expiry: 15 * time.Minute}), conn.Release, nil
}

// run starts f until the test (or stop) ends.
func run(t *testing.T, f *Fencer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func (r *rig) blocklisted(a string) bool {
	bl, err := blocklist.ListBlocklist(r.ctx, r.conn)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, l := range bl {
		if l.Range && l.Prefix == netip.MustParsePrefix(a+"/32") {
			return true
		}
	}
	return false
}

func (r *rig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *rig) setTaint(node string, on bool) {
	r.t.Helper()
	n, err := r.kc.CoreV1().Nodes().Get(r.ctx, node, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	n.Spec.Taints = nil
	if on {
		n.Spec.Taints = []corev1.Taint{{Key: OutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	}
	if _, err := r.kc.CoreV1().Nodes().Update(r.ctx, n, metav1.UpdateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) record(node string) *Record {
	rec, err := (&store{kc: r.kc, namespace: "default", name: testDriver + "-fencing"}).load(r.ctx, node)
	if err != nil {
		r.t.Fatal(err)
	}
	return rec
}

func (r *rig) events(node, reason string) int {
	list, err := r.kc.CoreV1().Events("").List(r.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=" + reason})
	if err != nil {
		r.t.Fatal(err)
	}
	return len(list.Items)
}

// rbdVolume makes what a published, staged RBD volume of node leaves in Ceph and Kubernetes:
// the image, its attachment object with the node's recorded addresses, a PV and a
// VolumeAttachment.
func (r *rig) rbdVolume(ns, node string, addrs ...string) (image string) {
	t := r.t
	io, err := r.conn.Rados().OpenIOContext(r.cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(io.Destroy)
	if err := rbd.NamespaceCreate(io, ns); err != nil {
		t.Fatal(err)
	}
	io.SetNamespace(ns)
	uid, _ := volid.NewUID('f')
	image = rbdname.Image(uid)
	opts := rbd.NewRbdImageOptions()
	defer opts.Destroy()
	if err := rbd.CreateImage(io, image, 8<<20, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbd.RemoveImage(io, image)
		_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
		io.SetNamespace("")
		_ = rbd.NamespaceRemove(io, ns)
	})
	var recorded []netip.Addr
	for _, a := range addrs {
		recorded = append(recorded, netip.MustParseAddr(a))
	}
	loc := radosop.Location{Conn: r.conn, Pool: r.cl.RBDPool, Namespace: ns}
	if _, err := attachment.Modify(r.ctx, loc, uid, "test", func(st *attachment.State) error {
		st.Published[node] = attachment.Publication{Mode: "SINGLE_NODE_WRITER"}
		st.Clients[node] = attachment.Clients{Addrs: recorded, At: time.Now()}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	handle := volid.RBDVolume{ClusterID: r.cl.ID, PoolID: io.GetPoolID(), Namespace: ns, UID: uid}.String()
	pvName := "pv-" + uid
	_, err = r.kc.CoreV1().PersistentVolumes().Create(r.ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Mi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: testDriver, VolumeHandle: handle}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.kc.StorageV1().VolumeAttachments().Create(r.ctx, &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: "va-" + uid},
		Spec:       storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return image
}

// node creates a Node reporting addrs (the fencer fences only a Node's own addresses).
func (r *rig) node(name string, addrs ...string) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	if _, err := r.kc.CoreV1().Nodes().Create(r.ctx, n, metav1.CreateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

// TestFenceOutOfServiceRBD: the out-of-service taint fences the addresses the node recorded for
// its RBD volumes, the writer there is cut off, and removing the taint lifts exactly the
// fencer's own entries: not one that was there before, nor one a NetworkFence holds. A fencer
// killed right after it recorded its intent, before touching the blocklist, is finished by the
// next one.
func TestFenceOutOfServiceRBD(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the child")
	}
	cl := cephtest.Env(t)
	cp := kubetest.Start(t, kubetest.Options{})
	kubeconfig := cp.Kubeconfig(t, cp.AdminToken)
	r := newRig(t, kubeconfig)
	csiAddons := kubetest.ModuleDir(t, "../../scripts/tools/csi-addons", "github.com/csi-addons/kubernetes-csi-addons")
	cp.ApplyCRDs(t, filepath.Join(csiAddons, "deploy/controller/crds.yaml"))
	// .2: the node's writer; .3: recorded too, but fenced before by somebody else
	const writer, other = "127.0.0.2", "127.0.0.3"
	r.node("node-a", writer, other)
	ns := fmt.Sprintf("fence%d", time.Now().UnixNano()%1e9)
	image := r.rbdVolume(ns, "node-a", writer, other)
	d, release, err := r.fencers(r.ctx, cl.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	cleanup := []netip.Prefix{netip.MustParsePrefix(writer + "/32"), netip.MustParsePrefix(other + "/32")}
	t.Cleanup(func() { _, _ = d.Unfence(context.Background(), cleanup) })
	if _, err := d.Fence(r.ctx, cleanup[1:]); err != nil {
		t.Fatal(err)
	}
	hold := cl.HoldImage(t, writer, cl.RBDPool, ns, image, true)
	defer hold()

	r.setTaint("node-a", true)
	runChild(t, kubeconfig, "nodefence.recorded")
	rec := r.record("node-a")
	if rec == nil || len(rec.Clusters[cl.ID].CIDRs) != 2 || fmt.Sprint(rec.Clusters[cl.ID].Preexisting) != "["+other+"/32]" {
		t.Fatalf("record after the killed fencer: %+v", rec)
	}
	if r.blocklisted(writer) {
		t.Fatal("the killed fencer got to the blocklist: the fault point is not before it")
	}
	start := time.Now()
	stop := run(t, r.fencer(&RBD{Driver: testDriver, Connect: r.connect}))
	r.waitFor("the writer's address fenced", func() bool { return r.blocklisted(writer) })
	t.Logf("fenced %v after the next fencer started (lease taken over from the killed one)", time.Since(start).Round(time.Millisecond))
	r.waitFor("a Fenced event on the node", func() bool { return r.events("node-a", "Fenced") > 0 })

	r.setTaint("node-a", false)
	r.waitFor("the fencer's entry removed", func() bool { return !r.blocklisted(writer) })
	r.waitFor("the record removed", func() bool { return r.record("node-a") == nil })
	if !r.blocklisted(other) {
		t.Fatal("unfencing removed an entry it did not make")
	}

	// a NetworkFence fencing the same address meanwhile keeps it fenced
	r.setTaint("node-a", true)
	r.waitFor("the writer's address fenced again", func() bool { return r.blocklisted(writer) })
	nf := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "csiaddons.openshift.io/v1alpha1", "kind": "NetworkFence", "metadata": map[string]any{"name": "keep"},
		"spec": map[string]any{"driver": testDriver, "fenceState": "Fenced", "cidrs": []any{writer + "/32"},
			"secret": map[string]any{"name": "x", "namespace": "default"}, "parameters": map[string]any{"clusterID": cl.ID}},
	}}
	if _, err := r.dyn.Resource(networkFences).Create(r.ctx, nf, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.setTaint("node-a", false)
	r.waitFor("the record removed", func() bool { return r.record("node-a") == nil })
	if !r.blocklisted(writer) {
		t.Fatal("unfencing lifted an address a NetworkFence fences")
	}
	stop()
	if n := r.events("node-a", "Unfenced"); n == 0 {
		t.Error("no Unfenced event on the node")
	}
}

// TestFencerChild is the fencer TestFenceOutOfServiceRBD kills at a fault point.
func TestFencerChild(t *testing.T) {
	kubeconfig := os.Getenv(childEnv)
	if kubeconfig == "" {
		t.Skip("child process of TestFenceOutOfServiceRBD only")
	}
	r := newRig(t, kubeconfig)
	f := r.fencer(&RBD{Driver: testDriver, Connect: r.connect})
	f.opts.Identity = "child"
	run(t, f)
	time.Sleep(time.Minute)
	t.Fatal("the child fencer was not killed at its fault point")
}

func runChild(t *testing.T, kubeconfig, point string) {
	t.Helper()
	childtest.RunToFaultPoint(t, "TestFencerChild", point, childEnv+"="+kubeconfig)
}

// TestFenceOutOfServiceCephFS: a node's ceph-fuse session (found by the node ID it announces,
// as the node-stage user of the driver's PV, under the PV's root) is fenced by address and
// evicted. An intruder on another address of the node network, with a Ceph user of its own,
// announcing the same node and mounting the same root, as a node of another Kubernetes
// cluster with the same generic node names would, is neither fenced nor evicted (issue 26).
func TestFenceOutOfServiceCephFS(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("in the child")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	r := newRig(t, "")
	cl := r.cl
	const addr, intruderAddr = "127.0.0.2", "127.0.0.3"
	r.node("node-b", addr)
	n := fmt.Sprint(time.Now().UnixNano() % 1e9)
	nodeUser, nodeKey := cephUser(t, r.ctx, r.conn, "client.fence-node-"+n)
	intruder, intruderKey := cephUser(t, r.ctx, r.conn, "client.fence-intruder-"+n)
	root := subvolume(t, r.ctx, r.pool, cl, "fence"+n)
	secret, pv := cephfsVolume(cl, "fence"+n, root, nodeUser, nodeKey)
	if _, err := r.kc.CoreV1().Secrets(secret.Namespace).Create(r.ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.kc.CoreV1().PersistentVolumes().Create(r.ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fuseMount(t, cl, addr, nodeUser, nodeKey, root, "node-b", nodeUser)
	fuseMount(t, cl, intruderAddr, intruder, intruderKey, root, "node-b", nodeUser)

	backend := &CephFS{Driver: testCephFSDriver, Kube: r.kc, Connect: r.connect, Clusters: func() []string { return []string{cl.ID} }}
	d, release, err := r.fencers(r.ctx, cl.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	cidr := []netip.Prefix{netip.MustParsePrefix(addr + "/32"), netip.MustParsePrefix(intruderAddr + "/32")}
	t.Cleanup(func() { _, _ = d.Unfence(context.Background(), cidr) })
	f := r.fencer(backend)
	// the node network holds the intruder's address too: only the attribution of its session
	// keeps it from being fenced
	f.opts.NodeNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/29")}
	run(t, f)
	r.setTaint("node-b", true)
	r.waitFor("node-b fenced", func() bool { return r.blocklisted(addr) })
	r.waitFor("node-b's session evicted", func() bool {
		ss, err := sessionList(r.ctx, r.conn)
		return err == nil && !strings.Contains(ss, "addr:"+addr+" ")
	})
	if r.blocklisted(intruderAddr) {
		t.Error("the intruder's address was fenced")
	}
	if ss, err := sessionList(r.ctx, r.conn); err != nil || !strings.Contains(ss, "addr:"+intruderAddr+" ") {
		t.Errorf("the intruder's session is gone: %s, %v", ss, err)
	}
	r.setTaint("node-b", false)
	r.waitFor("node-b unfenced", func() bool { return !r.blocklisted(addr) })
}

// TestCephFSAttribution: on the local cluster (PVs and Secrets from a fake API), the CephFS
// backend attributes to a node only the sessions of the node-stage user of the driver's PVs
// under a PV's root, whatever the sessions announce, and evicts only the sessions at the
// addresses it is given (issue 26, item 3).
func TestCephFSAttribution(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	cl := cephtest.Env(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close) // after the users and subvolume are removed with its connections
	conn, err := pool.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	n := fmt.Sprint(time.Now().UnixNano() % 1e9)
	nodeUser, nodeKey := cephUser(t, ctx, conn, "client.attr-node-"+n)
	intruder, intruderKey := cephUser(t, ctx, conn, "client.attr-intruder-"+n)
	root := subvolume(t, ctx, pool, cl, "attr"+n)
	secret, pv := cephfsVolume(cl, "attr"+n, root, nodeUser, nodeKey)
	const node, intruderAddr, outsideAddr = "127.0.0.2", "127.0.0.3", "127.0.0.4"
	fuseMount(t, cl, node, nodeUser, nodeKey, root, "node-b", nodeUser)
	// another user announcing the node and the node's user, mounting the PV's root
	fuseMount(t, cl, intruderAddr, intruder, intruderKey, root, "node-b", nodeUser)
	// the node's user (a key that leaked), mounting the filesystem's root, above every PV
	fuseMount(t, cl, outsideAddr, nodeUser, nodeKey, "/", "node-b", nodeUser)

	backend := &CephFS{Driver: testCephFSDriver, Kube: fake.NewClientset(secret, pv),
		Connect:  func(ctx context.Context, _ string) (*ceph.Conn, error) { return pool.Get(ctx, cl.Monitors, cl.Admin) },
		Clusters: func() []string { return []string{cl.ID} }}
	clients, err := backend.Clients(ctx, "node-b")
	if err != nil || fmt.Sprint(clients) != fmt.Sprintf("map[%s:[%s]]", cl.ID, node) {
		t.Fatalf("clients of node-b: %v, %v; want only %s (not the intruder's %s, nor %s outside the PV)", clients, err, node, intruderAddr, outsideAddr)
	}
	if err := backend.Cut(ctx, cl.ID, "node-b", []netip.Addr{netip.MustParseAddr(node)}); err != nil {
		t.Fatal(err)
	}
	ss, err := sessionList(ctx, conn)
	if err != nil || strings.Contains(ss, "addr:"+node+" ") || !strings.Contains(ss, "addr:"+intruderAddr+" ") {
		t.Fatalf("sessions after the cut: %s, %v; want %s's evicted, %s's kept", ss, err, node, intruderAddr)
	}
}

const testCephFSDriver = "cephfs.fencetest.monoceph.io"

// cephUser makes a Ceph user that can mount the test's filesystem (removed when the test
// ends) and returns its ID and key.
func cephUser(t *testing.T, ctx context.Context, conn *ceph.Conn, entity string) (id, key string) {
	t.Helper()
	out, err := ceph.MonCommand(ctx, conn, cephtest.ReadableKey(map[string]any{"prefix": "auth get-or-create", "entity": entity,
		"caps": []string{"mon", "allow r", "mds", "allow rw", "osd", "allow rw"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ceph.MonCommand(context.Background(), conn, map[string]any{"prefix": "auth del", "entity": entity}); err != nil {
			t.Errorf("auth del: %v", err)
		}
	})
	var users []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &users); err != nil || len(users) != 1 {
		t.Fatalf("auth get-or-create: %s: %v", out, err)
	}
	return strings.TrimPrefix(entity, "client."), users[0].Key
}

// subvolume makes a subvolume (removed when the test ends) and returns its path.
func subvolume(t *testing.T, ctx context.Context, pool *ceph.Pool, cl cephtest.Cluster, name string) string {
	t.Helper()
	conn, err := pool.GetForMgr(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := ceph.MgrCommand(ctx, conn, map[string]any{"prefix": "fs subvolume create", "vol_name": cl.FSName, "sub_name": name}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = ceph.MgrCommand(context.Background(), conn, map[string]any{"prefix": "fs subvolume rm", "vol_name": cl.FSName, "sub_name": name, "force": true})
	})
	out, err := ceph.MgrCommand(ctx, conn, map[string]any{"prefix": "fs subvolume getpath", "vol_name": cl.FSName, "sub_name": name})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// cephfsVolume is the PV of a CephFS volume of testCephFSDriver at root, and the node-stage
// Secret it names, holding the user nodes stage it as.
func cephfsVolume(cl cephtest.Cluster, name, root, user, key string) (*corev1.Secret, *corev1.PersistentVolume) {
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-node", Namespace: "default"},
		Data:       map[string][]byte{ceph.SecretUserID: []byte(user), ceph.SecretUserKey: []byte(key)},
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("8Mi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: testCephFSDriver, VolumeHandle: name,
				VolumeAttributes:   map[string]string{"clusterID": cl.ID, "fsName": cl.FSName, "rootPath": root},
				NodeStageSecretRef: &corev1.SecretReference{Namespace: "default", Name: name + "-node"},
			}},
		},
	}
	return secret, pv
}

// fuseMount mounts root with ceph-fuse as user id from addr, announcing node and entity
// (unmounted when the test ends).
func fuseMount(t *testing.T, cl cephtest.Cluster, addr, id, key, root, node, entity string) {
	t.Helper()
	dir := t.TempDir()
	keyring := filepath.Join(t.TempDir(), "keyring")
	if err := os.WriteFile(keyring, []byte("[client."+id+"]\n\tkey = "+key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := exec.Command("ceph-fuse", "-c", os.Getenv("CEPH_CONF"), "--keyring", keyring, "--id", id,
		"--client_fs", cl.FSName, "-r", root, "--client_metadata=monoceph.node="+node+",hostname="+node+",entity_id="+entity,
		"--admin_socket=", "--pid_file=", "--log_file=", dir)
	mnt.Env = append(os.Environ(), cephtest.BindSrcEnv(t, addr)...)
	if out, err := mnt.CombinedOutput(); err != nil {
		t.Fatalf("ceph-fuse as %s from %s: %v: %s", id, addr, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// sessionList is every active MDS's client list, printed.
func sessionList(ctx context.Context, conn *ceph.Conn) (string, error) {
	ss, err := listSessions(ctx, conn, nil)
	var b strings.Builder
	for _, s := range ss {
		fmt.Fprintf(&b, "{id:%d addr:%s node:%s root:%s} ", s.id, s.addr, s.node, s.root)
	}
	return b.String(), err
}
