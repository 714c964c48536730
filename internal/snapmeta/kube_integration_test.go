package snapmeta

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/client/apis/snapshotmetadataservice/v1beta1"
	smsclient "github.com/kubernetes-csi/external-snapshot-metadata/client/clientset/versioned"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/iterator"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	snapclient "github.com/kubernetes-csi/external-snapshotter/client/v8/clientset/versioned"
	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/volid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	testDriver   = "rbd.monoceph.io"
	testAudience = "monoceph-snapshot-metadata"
	backupNS     = "backups"
)

// kubeEnv is env plus a control plane holding VolumeSnapshots of env's snapshots, and the
// Kubernetes-facing service on TLS, published by a SnapshotMetadataService object.
type kubeEnv struct {
	*env
	cp   *kubetest.ControlPlane
	kc   kubernetes.Interface
	sc   snapclient.Interface
	addr string
	// metrics of the TLS server
	metrics *server.Metrics
	reg     *prometheus.Registry
}

func newKubeEnv(t *testing.T) *kubeEnv {
	t.Helper()
	return newKubeEnvWith(t, Options{MaxStreamDuration: time.Minute}, Limits{})
}

// newKubeEnvWith is newKubeEnv with the engine's options and the service's limits given.
func newKubeEnvWith(t *testing.T, opts Options, limits Limits) *kubeEnv {
	t.Helper()
	cp := kubetest.Start(t, kubetest.Options{})
	cp.ApplyCRDs(t, kubetest.SnapshotCRDs(t)...)
	k := &kubeEnv{env: newEnv(t, opts), cp: cp,
		kc: kubernetes.NewForConfigOrDie(cp.Admin), sc: snapclient.NewForConfigOrDie(cp.Admin)}
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{backupNS, "monoceph"} {
		must(k.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	must(k.kc.CoreV1().Secrets("monoceph").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ceph-snapshotter"},
		StringData: k.cl.Secrets()}, metav1.CreateOptions{}))
	must(k.sc.SnapshotV1().VolumeSnapshotClasses().Create(ctx, &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: "rbd"},
		Driver: testDriver, DeletionPolicy: snapv1.VolumeSnapshotContentDelete,
		Parameters: map[string]string{paramSecretName: "ceph-snapshotter", paramSecretNamespace: "monoceph"}}, metav1.CreateOptions{}))
	// a backup service account allowed to read VolumeSnapshots in backupNS, and one that is not
	for _, sa := range []string{"backup", "nobody"} {
		must(k.kc.CoreV1().ServiceAccounts(backupNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}))
	}
	must(k.kc.RbacV1().Roles(backupNS).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "snapshot-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{snapv1.GroupName}, Resources: []string{"volumesnapshots"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}))
	must(k.kc.RbacV1().RoleBindings(backupNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "backup"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "snapshot-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "backup", Namespace: backupNS}}}, metav1.CreateOptions{}))

	certFile, keyFile := keyPairFiles(t, cp.CA, "snapshot-metadata")
	kube := &APIServer{Client: k.kc, Snapshots: k.sc, Audience: testAudience, Driver: testDriver}
	k.reg = prometheus.NewRegistry()
	k.metrics = server.NewMetrics(k.reg)
	srv, err := NewTLSServer("127.0.0.1:0", certFile, keyFile, NewKubeServer(k.engine, kube, limits), k.metrics)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Shutdown(5 * time.Second) })
	k.addr = srv.Addr()
	must(smsclient.NewForConfigOrDie(cp.Admin).CbtV1beta1().SnapshotMetadataServices().Create(ctx, &v1beta1.SnapshotMetadataService{
		ObjectMeta: metav1.ObjectMeta{Name: testDriver},
		Spec:       v1beta1.SnapshotMetadataServiceSpec{Address: k.addr, CACert: cp.CA.CertPEM, Audience: testAudience},
	}, metav1.CreateOptions{}))
	return k
}

// volumeSnapshot publishes a CSI snapshot as a bound VolumeSnapshot (what the
// external-snapshotter would have done), ready or not, of driver, in class "rbd".
func (k *kubeEnv) volumeSnapshot(t *testing.T, name, handle, driver string, ready bool) {
	t.Helper()
	k.volumeSnapshotOfClass(t, name, handle, driver, ready, "rbd", "rbd")
}

// volumeSnapshotOfClass is volumeSnapshot with the VolumeSnapshot's and the content's class
// names ("": none).
func (k *kubeEnv) volumeSnapshotOfClass(t *testing.T, name, handle, driver string, ready bool, class, contentClass string) {
	t.Helper()
	k.volumeSnapshotWith(t, name, handle, driver, ready, class, contentClass, nil)
}

// volumeSnapshotWith is volumeSnapshotOfClass with annotations on the content (the snapshot
// controller annotates the contents of group snapshot members with their Secret).
func (k *kubeEnv) volumeSnapshotWith(t *testing.T, name, handle, driver string, ready bool, class, contentClass string, ann map[string]string) {
	t.Helper()
	ctx := context.Background()
	content := "snapcontent-" + name
	orNil := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	vsc, err := k.sc.SnapshotV1().VolumeSnapshotContents().Create(ctx, &snapv1.VolumeSnapshotContent{
		ObjectMeta: metav1.ObjectMeta{Name: content, Annotations: ann},
		Spec: snapv1.VolumeSnapshotContentSpec{
			Driver: driver, DeletionPolicy: snapv1.VolumeSnapshotContentRetain, VolumeSnapshotClassName: orNil(contentClass),
			Source:            snapv1.VolumeSnapshotContentSource{SnapshotHandle: &handle},
			VolumeSnapshotRef: corev1.ObjectReference{Kind: "VolumeSnapshot", Namespace: backupNS, Name: name},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vsc.Status = &snapv1.VolumeSnapshotContentStatus{SnapshotHandle: &handle, ReadyToUse: &ready}
	if _, err := k.sc.SnapshotV1().VolumeSnapshotContents().UpdateStatus(ctx, vsc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	vs, err := k.sc.SnapshotV1().VolumeSnapshots(backupNS).Create(ctx, &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{VolumeSnapshotContentName: &content}, VolumeSnapshotClassName: orNil(class)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vs.Status = &snapv1.VolumeSnapshotStatus{BoundVolumeSnapshotContentName: &content, ReadyToUse: &ready}
	if _, err := k.sc.SnapshotV1().VolumeSnapshots(backupNS).UpdateStatus(ctx, vs, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// token issues a token of a backupNS service account for audience.
func (k *kubeEnv) token(t *testing.T, sa, audience string) string {
	t.Helper()
	return k.cp.Token(t, backupNS, sa, audience)
}

// client dials the published address over TLS trusting the test CA.
func (k *kubeEnv) client(t *testing.T) api.SnapshotMetadataClient {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(k.cp.CA.CertPEM)
	cc, err := grpc.NewClient(k.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return api.NewSnapshotMetadataClient(cc)
}

// collector is an iterator emitter that keeps what it receives.
type collector struct {
	headers []Header
	extents []Extent
	done    bool
}

func (c *collector) SnapshotMetadataIteratorRecord(_ int, m iterator.IteratorMetadata) error {
	h := Header{Style: Variable, Capacity: m.VolumeCapacityBytes}
	if m.BlockMetadataType == api.BlockMetadataType_FIXED_LENGTH {
		h.Style = Fixed
	}
	c.headers = append(c.headers, h)
	for _, b := range m.BlockMetadata {
		c.extents = append(c.extents, Extent{b.GetByteOffset(), b.GetSizeBytes()})
	}
	return nil
}

func (c *collector) SnapshotMetadataIteratorDone(int) error { c.done = true; return nil }

// TestUpstreamIteratorOverTLS has the upstream client library (pkg/iterator, what backup
// applications and snapshot-metadata-lister use) find the service through the
// SnapshotMetadataService object, get a token for its audience and read over TLS the same
// extents rbd diff reports.
func TestUpstreamIteratorOverTLS(t *testing.T) {
	k := newKubeEnv(t)
	h := newHistory(t, k.env)
	k.volumeSnapshot(t, "s1", h.s1.String(), testDriver, true)
	k.volumeSnapshot(t, "s3", h.s3.String(), testDriver, true)
	clients, err := iterator.BuildClients(k.cp.Admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		prevName string
		prevID   string
		base     *volid.RBDSnapshot
		start    int64
		max      int32
	}{
		{name: "allocated", max: 7},
		{name: "delta by base name", prevName: "s1", base: &h.s1},
		{name: "delta by base ID", prevID: h.s1.String(), base: &h.s1, max: 3},
		{name: "delta resumed", prevID: h.s1.String(), base: &h.s1, start: 30*MiB + 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			col := &collector{}
			err := iterator.GetSnapshotMetadata(context.Background(), iterator.Args{
				Clients: clients, Emitter: col, Namespace: backupNS, SnapshotName: "s3",
				PrevSnapshotName: c.prevName, PrevSnapshotID: c.prevID, StartingOffset: c.start, MaxResults: c.max,
				SANamespace: backupNS, SAName: "backup",
			})
			if err != nil {
				t.Fatal(err)
			}
			want := clip(k.oracle(t, h.s3, c.base, false), c.start)
			if !col.done || !reflect.DeepEqual(col.extents, want) {
				t.Errorf("done %v, extents\n got %v\nwant %v", col.done, col.extents, want)
			}
			for _, hd := range col.headers {
				if hd.Capacity != int64(h.img.size) || hd.Style != Variable {
					t.Errorf("header %+v", hd)
				}
			}
		})
	}
}

// TestKubeRejections checks who and what the Kubernetes-facing service refuses.
func TestKubeRejections(t *testing.T) {
	k := newKubeEnv(t)
	im := k.newImage(t, 8<<20)
	im.write(t, 0, 4*KiB, 1)
	s1 := im.snap(t)
	other := k.newImage(t, 8<<20).snap(t)
	k.volumeSnapshot(t, "ready", s1.String(), testDriver, true)
	k.volumeSnapshot(t, "pending", s1.String(), testDriver, false)
	k.volumeSnapshot(t, "foreign", s1.String(), "other.csi.example.com", true)
	client := k.client(t)
	good := k.token(t, "backup", testAudience)

	for _, c := range []struct {
		name     string
		token    string
		ns, snap string
		base     string // delta when set
		want     codes.Code
	}{
		{name: "allowed", token: good, ns: backupNS, snap: "ready", want: codes.OK},
		{name: "missing token", token: "", ns: backupNS, snap: "ready", want: codes.Unauthenticated},
		{name: "garbage token", token: "not-a-token", ns: backupNS, snap: "ready", want: codes.Unauthenticated},
		{name: "token for another audience", token: k.token(t, "backup", "someone-else"), ns: backupNS, snap: "ready", want: codes.Unauthenticated},
		{name: "API server audience", token: k.token(t, "backup", "https://kubernetes.default.svc"), ns: backupNS, snap: "ready", want: codes.Unauthenticated},
		{name: "no RBAC for volumesnapshots", token: k.token(t, "nobody", testAudience), ns: backupNS, snap: "ready", want: codes.PermissionDenied},
		{name: "no RBAC in that namespace", token: good, ns: "monoceph", snap: "ready", want: codes.PermissionDenied},
		{name: "missing namespace", token: good, ns: "", snap: "ready", want: codes.InvalidArgument},
		{name: "missing snapshot name", token: good, ns: backupNS, snap: "", want: codes.InvalidArgument},
		{name: "unknown snapshot", token: good, ns: backupNS, snap: "nope", want: codes.NotFound},
		{name: "not ready", token: good, ns: backupNS, snap: "pending", want: codes.FailedPrecondition},
		{name: "another driver's snapshot", token: good, ns: backupNS, snap: "foreign", want: codes.NotFound},
		{name: "delta: base of another volume", token: good, ns: backupNS, snap: "ready", base: other.String(), want: codes.InvalidArgument},
		{name: "delta: malformed base", token: good, ns: backupNS, snap: "ready", base: "nope", want: codes.InvalidArgument},
		{name: "delta: missing token", token: "", ns: backupNS, snap: "ready", base: s1.String(), want: codes.Unauthenticated},
		{name: "delta: allowed", token: good, ns: backupNS, snap: "ready", base: s1.String(), want: codes.OK},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var recv func() error
			if c.base == "" {
				st, err := client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: c.token, Namespace: c.ns, SnapshotName: c.snap})
				if err != nil {
					t.Fatal(err)
				}
				recv = func() error { _, err := st.Recv(); return err }
			} else {
				st, err := client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{SecurityToken: c.token, Namespace: c.ns, BaseSnapshotId: c.base, TargetSnapshotName: c.snap})
				if err != nil {
					t.Fatal(err)
				}
				recv = func() error { _, err := st.Recv(); return err }
			}
			var err error
			for err == nil {
				err = recv()
			}
			if err == io.EOF {
				err = nil
			}
			if status.Code(err) != c.want {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

// TestChangedBlocksCLI runs the changed-blocks command's code path (the upstream iterator)
// in both output formats.
func TestChangedBlocksCLI(t *testing.T) {
	k := newKubeEnv(t)
	h := newHistory(t, k.env)
	k.volumeSnapshot(t, "s2", h.s2.String(), testDriver, true)
	k.volumeSnapshot(t, "s3", h.s3.String(), testDriver, true)
	want := k.oracle(t, h.s3, &h.s2, false)

	var out bytes.Buffer
	err := ChangedBlocks(context.Background(), k.cp.Admin, ChangedBlocksArgs{Namespace: backupNS, Snapshot: "s3",
		BaseSnapshot: "s2", ServiceAccount: backupNS + "/backup", Output: "json"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		BlockMetadataType   string
		VolumeCapacityBytes int64
		Extents             []struct{ Offset, Length int64 }
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var got []Extent
	for _, x := range doc.Extents {
		got = append(got, Extent{x.Offset, x.Length})
	}
	if doc.BlockMetadataType != "VARIABLE_LENGTH" || doc.VolumeCapacityBytes != int64(h.img.size) || !reflect.DeepEqual(got, want) {
		t.Errorf("json output %s\nwant extents %v", out.String(), want)
	}

	out.Reset()
	err = ChangedBlocks(context.Background(), k.cp.Admin, ChangedBlocksArgs{Namespace: backupNS, Snapshot: "s3",
		BaseSnapshotID: h.s2.String(), ServiceAccount: backupNS + "/backup"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("table output:\n%s", out.String())
	if !bytes.Contains(out.Bytes(), []byte("OFFSET")) || !bytes.Contains(out.Bytes(), []byte(" extents, ")) {
		t.Errorf("table output:\n%s", out.String())
	}

	if err := ChangedBlocks(context.Background(), k.cp.Admin, ChangedBlocksArgs{Namespace: backupNS, Snapshot: "s3",
		ServiceAccount: backupNS + "/nobody"}, io.Discard); status.Code(errorsCause(err)) != codes.PermissionDenied {
		t.Errorf("as nobody: %v, want PermissionDenied", err)
	}
}

// errorsCause finds the gRPC status inside the iterator's wrapped errors.
func errorsCause(err error) error {
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	return err
}

// TestSnapshotterSecretTemplates resolves the snapshotter Secret of VolumeSnapshotClasses whose
// parameters use the templates external-snapshotter resolves for CreateSnapshot, and picks the
// class as the external-snapshot-metadata sidecar does.
func TestSnapshotterSecretTemplates(t *testing.T) {
	k := newKubeEnv(t)
	ctx := context.Background()
	im := k.newImage(t, 8<<20)
	im.write(t, 0, 4*KiB, 1)
	s1 := im.snap(t)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	class := func(name string, params map[string]string, isDefault bool) {
		t.Helper()
		c := &snapv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: testDriver,
			DeletionPolicy: snapv1.VolumeSnapshotContentDelete, Parameters: params}
		if isDefault {
			c.Annotations = map[string]string{annDefaultClass: "true"}
		}
		must(k.sc.SnapshotV1().VolumeSnapshotClasses().Create(ctx, c, metav1.CreateOptions{}))
	}
	secret := func(ns, name string) {
		t.Helper()
		must(k.kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: k.cl.Secrets()}, metav1.CreateOptions{}))
	}
	secretParams := func(name, ns string) map[string]string {
		return map[string]string{paramSecretName: name, paramSecretNamespace: ns}
	}
	// per-snapshot Secrets next to the snapshots, and one per content in the driver's namespace
	class("per-snapshot", secretParams("${volumesnapshot.name}-ceph", "${volumesnapshot.namespace}"), false)
	secret(backupNS, "t1-ceph")
	class("per-content", secretParams("ceph-${volumesnapshotcontent.name}", "monoceph"), false)
	secret("monoceph", "ceph-snapcontent-t2")
	class("default", secretParams("ceph-snapshotter", "monoceph"), true)
	class("bad-token", secretParams("${pvc.name}", "monoceph"), false)
	class("half", map[string]string{paramSecretName: "ceph-snapshotter"}, false)
	class("bad-namespace", secretParams("ceph-snapshotter", "${volumesnapshotcontent.name}.x"), false)

	client := k.client(t)
	token := k.token(t, "backup", testAudience)
	secret("monoceph", "group-ceph")
	member := func(secret string) map[string]string {
		return map[string]string{annSecretName: secret, annSecretNamespace: "monoceph"}
	}
	for _, c := range []struct {
		snap, class, contentClass string
		ann                       map[string]string
		want                      codes.Code
		text                      string
	}{
		{snap: "t1", class: "per-snapshot", contentClass: "per-snapshot", want: codes.OK},
		{snap: "t2", class: "per-content", contentClass: "per-content", want: codes.OK},
		{snap: "t3", contentClass: "rbd", want: codes.OK},                          // pre-provisioned: the content's class
		{snap: "t4", want: codes.OK},                                               // neither: the driver's default class
		{snap: "t5", class: "per-snapshot", want: codes.NotFound, text: "t5-ceph"}, // resolved, but no such Secret
		{snap: "t6", class: "bad-token", want: codes.FailedPrecondition, text: `unknown tokens ["pvc.name"]`},
		{snap: "t7", class: "half", want: codes.FailedPrecondition, text: "go together"},
		{snap: "t8", class: "bad-namespace", want: codes.FailedPrecondition, text: "not a namespace name"},
		// group snapshot members name no class: their content's annotations name the Secret of
		// the group snapshot's class, ahead of the default class
		{snap: "t9", ann: member("group-ceph"), want: codes.OK},
		{snap: "t10", ann: member("group-missing"), want: codes.NotFound, text: "group-missing"},
		{snap: "t11", class: "per-snapshot", ann: member("group-missing"), want: codes.NotFound, text: "t11-ceph"}, // a class wins
	} {
		t.Run(c.snap, func(t *testing.T) {
			k.volumeSnapshotWith(t, c.snap, s1.String(), testDriver, true, c.class, c.contentClass, c.ann)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := client.GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{SecurityToken: token, Namespace: backupNS, SnapshotName: c.snap})
			if err != nil {
				t.Fatal(err)
			}
			for err == nil {
				_, err = st.Recv()
			}
			if err == io.EOF {
				err = nil
			}
			if status.Code(err) != c.want || !strings.Contains(status.Convert(err).Message(), c.text) {
				t.Fatalf("got %v, want %v containing %q", err, c.want, c.text)
			}
		})
	}
}
