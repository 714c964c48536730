package snapmeta

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/monoceph/monoceph/internal/childtest"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// stuckPlan is what the stuck client (this test binary re-executed, TestStuckClientHelper) is
// told on its stdin: where to connect, as whom, and which streams to open.
type stuckPlan struct {
	Addr    string
	CA      []byte
	Tokens  map[string]string // user → token
	Streams []stuckStream
}

type stuckStream struct {
	Name, User              string
	Base, Target, Namespace string
}

// startStuckClient runs the plan in another process, so that its goroutines, buffers and
// memory are not counted as the server's.
func startStuckClient(t *testing.T, plan stuckPlan) *childtest.Child {
	t.Helper()
	c := childtest.Start(t, "TestStuckClientHelper", "MONOCEPH_SNAPMETA_STUCK_CLIENT=1")
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	c.Send(t, "%s", b)
	return c
}

// TestStuckClientHelper is the stuck client: it connects once per user (fixed 64 KiB windows,
// so the transport does not buffer a whole stream for it), says "ready", and on "open" opens
// the plan's streams one after the other, reports each one's first message or error
// ("first <name> <code>", or "first <name> waiting" when none comes within 2 s, then
// "end <name> <code>" when it does), and never reads again until stdin closes.
func TestStuckClientHelper(t *testing.T) {
	if os.Getenv("MONOCEPH_SNAPMETA_STUCK_CLIENT") != "1" {
		t.Skip("runs only as the stuck client of TestStuckReadersAreCutAtTheLimit")
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(nil, 1<<20)
	var plan stuckPlan
	if !sc.Scan() {
		t.Fatal("no plan")
	}
	if err := json.Unmarshal(sc.Bytes(), &plan); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(plan.CA)
	clients := map[string]api.SnapshotMetadataClient{}
	for user, token := range plan.Tokens {
		cc, err := grpc.NewClient(plan.Addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})),
			grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		clients[user] = api.NewSnapshotMetadataClient(cc)
		// connect and authenticate once: a request without namespace fails after the TokenReview
		st, err := clients[user].GetMetadataAllocated(context.Background(), &api.GetMetadataAllocatedRequest{SecurityToken: token, SnapshotName: "x"})
		if err == nil {
			_, err = st.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("warm-up as %s: %v", user, err)
		}
	}
	childtest.Say("ready")
	if !sc.Scan() || sc.Text() != "open" {
		t.Fatal("no open command")
	}
	for _, s := range plan.Streams {
		st, err := clients[s.User].GetMetadataDelta(context.Background(), &api.GetMetadataDeltaRequest{SecurityToken: plan.Tokens[s.User],
			Namespace: s.Namespace, BaseSnapshotId: s.Base, TargetSnapshotName: s.Target, MaxResults: 1})
		if err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() { _, err := st.Recv(); first <- err }()
		select {
		case err := <-first:
			childtest.Say("first %s %s", s.Name, status.Code(err))
		case <-time.After(2 * time.Second):
			childtest.Say("first %s waiting", s.Name)
			go func() { childtest.Say("end %s %s", s.Name, status.Code(<-first)) }()
		}
	}
	for sc.Scan() { // hold every stream, unread, until the test is done
	}
}

// inFlight is the RPCs the server's handlers are running now.
func inFlight(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "monoceph_grpc_requests_in_flight" {
			for _, m := range mf.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// settled returns the goroutine count and RSS (MiB) once garbage is collected and returned to
// the system.
func settled(t *testing.T) (int, float64) {
	t.Helper()
	time.Sleep(200 * time.Millisecond) // let finished goroutines exit
	runtime.GC()
	debug.FreeOSMemory()
	return runtime.NumGoroutine(), vmRSS(t)
}

// TestStuckReadersAreCutAtTheLimit has clients that open changed block streams over TLS and
// never read them. Past the per-user and the total cap a stream gets RESOURCE_EXHAUSTED at
// once; no more diff iterations run than the cap, the others wait for a turn; at the stream
// duration limit every handler returns although the clients still hold their streams unread,
// and the server's goroutines and memory are back where they were.
func TestStuckReadersAreCutAtTheLimit(t *testing.T) {
	const limit = 5 * time.Second
	k := newKubeEnvWith(t, Options{MaxStreamDuration: limit, MaxConcurrentDiffs: 2}, Limits{MaxStreams: 3, MaxStreamsPerUser: 2})
	ctx := context.Background()
	if _, err := k.kc.CoreV1().ServiceAccounts(backupNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "backup2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.kc.RbacV1().RoleBindings(backupNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "backup2"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "snapshot-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "backup2", Namespace: backupNS}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base, target, _ := k.manyExtents(t)
	k.volumeSnapshot(t, "big", target.String(), testDriver, true)

	stream := func(name, user string) stuckStream {
		return stuckStream{Name: name, User: user, Base: base.String(), Target: "big", Namespace: backupNS}
	}
	c := startStuckClient(t, stuckPlan{Addr: k.addr, CA: k.cp.CA.CertPEM,
		Tokens: map[string]string{"a": k.token(t, "backup", testAudience), "b": k.token(t, "backup2", testAudience)},
		Streams: []stuckStream{
			stream("a1", "a"), stream("a2", "a"), // a's two streams, both iterating
			stream("a3", "a"), // past a's cap
			stream("b1", "b"), // within every stream cap, but both diff turns are taken: waits
			stream("b2", "b"), // past the total cap
		}})
	if got := c.Next(t, time.Minute); got != "ready" {
		t.Fatalf("stuck client: %s", got)
	}
	goroutines0, rss0 := settled(t)

	opened := time.Now()
	c.Send(t, "open")
	want := []string{"first a1 OK", "first a2 OK", "first a3 ResourceExhausted", "first b1 waiting", "first b2 ResourceExhausted"}
	for _, w := range want {
		if got := c.Next(t, 30*time.Second); got != w {
			t.Fatalf("stuck client: %q, want %q", got, w)
		}
	}
	if n := k.engine.openImages.Load(); n != 2 {
		t.Errorf("%d images open for the stuck streams, want 2 (the diff turns)", n)
	}
	_, rssStuck := settled(t)

	// the limit cuts every stream, also the one still waiting for its turn
	waitUntil(t, opened.Add(limit+5*time.Second), "every handler to return", func() bool { return inFlight(t, k.reg) == 0 })
	cut := time.Since(opened)
	// b1 got a turn when a's streams were cut, just before its own cut (its first message), or not
	if got := c.Next(t, 5*time.Second); got != "end b1 DeadlineExceeded" && got != "end b1 OK" {
		t.Errorf("the stream waiting for a diff turn: %q, want DeadlineExceeded or a first message", got)
	}
	waitUntil(t, opened.Add(limit+10*time.Second), "every image closed", func() bool { return k.engine.openImages.Load() == 0 })
	goroutines1, rss1 := settled(t)
	t.Logf("handlers returned %v after the streams opened (limit %v); goroutines %d before, %d after; RSS %.1f MiB before, %.1f while stuck, %.1f after; peak diff iterations %d",
		cut.Round(10*time.Millisecond), limit, goroutines0, goroutines1, rss0, rssStuck, rss1, k.engine.peakDiffs.Load())
	if cut < limit-time.Second {
		t.Errorf("handlers returned after %v, before the %v limit", cut, limit)
	}
	if p := k.engine.peakDiffs.Load(); p > 2 {
		t.Errorf("%d diff iterations ran at once, the cap is 2", p)
	}
	if goroutines1 > goroutines0+2 {
		t.Errorf("%d goroutines after the cut, %d before the streams", goroutines1, goroutines0)
	}
	if rss1 > rss0+16 {
		t.Errorf("RSS %.1f MiB after the cut, %.1f before the streams", rss1, rss0)
	}

	// the slots are free again, though the stuck client still holds its streams
	n, err := countAPIDelta(k.client(t), k.token(t, "backup", testAudience), base.String(), "big")
	if err != nil || n == 0 {
		t.Fatalf("a new stream after the cut: %d extents, %v", n, err)
	}
}

// countAPIDelta reads a whole delta stream of a VolumeSnapshot in backupNS and counts its extents.
func countAPIDelta(client api.SnapshotMetadataClient, token, base, target string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := client.GetMetadataDelta(ctx, &api.GetMetadataDeltaRequest{SecurityToken: token, Namespace: backupNS, BaseSnapshotId: base, TargetSnapshotName: target})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		m, err := st.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += len(m.GetBlockMetadata())
	}
}

// TestStuckReaderOnCSISocketIsCut: the same cut on the CSI socket, where the sidecar (or any
// CSI client) may stop reading too.
func TestStuckReaderOnCSISocketIsCut(t *testing.T) {
	const limit = 3 * time.Second
	e := newEnv(t, Options{MaxStreamDuration: limit})
	base, target, _ := e.manyExtents(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := time.Now()
	e.openUnread(t, ctx, base, target) // and never read again
	waitUntil(t, opened.Add(limit+5*time.Second), "the handler to return", func() bool { return inFlight(t, e.reg) == 0 })
	if cut := time.Since(opened); cut < limit-time.Second {
		t.Errorf("the handler returned after %v, before the %v limit", cut, limit)
	}
	waitUntil(t, opened.Add(limit+10*time.Second), "the image closed", func() bool { return e.engine.openImages.Load() == 0 })
}
