package snapmeta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/monoceph/monoceph/internal/volid"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	authnv1 "k8s.io/api/authentication/v1"
)

// benchFixture is an image whose delta between two snapshots has benchExtents extents: 128 MiB
// of 64 KiB objects, each full-size in the base snapshot, then 512 bytes written in every
// 1 KiB. (Memstore keeps all data in RAM; what matters is the number of extents, not bytes.)
const (
	benchSize    = 128 << 20
	benchOrder   = 16
	benchExtents = benchSize / 1024
	benchRounds  = 7
)

// BenchmarkGetMetadataDelta streams the delta of benchExtents extents through the CSI socket
// and through the Kubernetes-facing TLS API, and compares extents/s with the floor measured in
// the same run and process: librbd's diff iteration of the same snapshots with a callback that
// only counts. Each round runs every path once, in rotating order; a path's ratio is the
// median of its per-round ratios, so drift on the shared cluster hits all paths alike.
// Resident memory is read before and after: it must not grow with the number of extents.
func BenchmarkGetMetadataDelta(b *testing.B) {
	e := newEnv(b, Options{})
	im := e.newImageOrder(b, benchSize, benchOrder)
	fillObjects(b, im)
	base := im.snap(b)
	t0 := time.Now()
	n := im.writeStrided(b, 512, 512, 1024)
	target := im.snap(b)
	b.Logf("fixture: %d writes in %v", n, time.Since(t0).Round(time.Millisecond))

	floor := func() (int, time.Duration) {
		t0 := time.Now()
		img, err := rbd.OpenImageReadOnly(e.io, im.name, rbdname.Snapshot(target.SnapUID))
		if err != nil {
			b.Fatal(err)
		}
		defer img.Close()
		count := 0
		err = img.DiffIterate(rbd.DiffIterateConfig{SnapName: rbdname.Snapshot(base.SnapUID), Length: benchSize,
			IncludeParent: rbd.IncludeParent, Callback: func(uint64, uint64, int, any) int { count++; return 0 }})
		if err != nil {
			b.Fatal(err)
		}
		return count, time.Since(t0)
	}
	viaCSI := func() (int, time.Duration) {
		t0 := time.Now()
		count, err := countDelta(e.client, base, target, e.cl.Secrets())
		if err != nil {
			b.Fatal(err)
		}
		return count, time.Since(t0)
	}

	// the engine alone, without gRPC: tells the engine's cost from the transport's
	engineOnly := func() (int, time.Duration) {
		t0 := time.Now()
		count := 0
		err := e.engine.Stream(context.Background(), Query{Target: SnapshotID{Own: target}, Base: &SnapshotID{Own: base}, Secrets: e.cl.Secrets()},
			func(_ Header, ext []Extent) error { count += len(ext); return nil })
		if err != nil {
			b.Fatal(err)
		}
		return count, time.Since(t0)
	}

	// the Kubernetes-facing API on TLS, with a static authorizer: TokenReview and
	// SubjectAccessReview cost once per request, not per extent, and are tested against a real
	// API server elsewhere (kube_integration_test.go)
	viaTLS := tlsPath(b, e, base, target)

	type path struct {
		name string
		run  func() (int, time.Duration)
	}
	paths := []path{{"librbd diff iterate", floor}, {"engine, no gRPC", engineOnly}, {"CSI socket", viaCSI}, {"TLS, Kubernetes API", viaTLS}}
	for _, p := range paths { // warm the OSD's caches and every path's connection
		p.run()
	}
	runtime.GC()
	rssBefore := vmRSS(b)
	times := make([][]time.Duration, len(paths))
	ratios := make([][]float64, len(paths))
	cpu := make([][]time.Duration, len(paths)) // this process's CPU time per stream
	b.ResetTimer()
	for r := range benchRounds {
		// rotate the order, so a path never always runs on the heels of the same other
		var floorT time.Duration
		for i := range paths {
			p := (i + r) % len(paths)
			c0 := cpuTime(b)
			n, d := paths[p].run()
			cpu[p] = append(cpu[p], cpuTime(b)-c0)
			if n != benchExtents {
				b.Fatalf("%s: %d extents, want %d", paths[p].name, n, benchExtents)
			}
			times[p] = append(times[p], d)
			if p == 0 {
				floorT = d
			}
		}
		for p := range paths {
			ratios[p] = append(ratios[p], floorT.Seconds()/times[p][r].Seconds())
		}
	}
	b.StopTimer()
	runtime.GC()
	rssAfter := vmRSS(b)

	rate := func(d time.Duration) float64 { return float64(benchExtents) / d.Seconds() }
	best := func(d []time.Duration) time.Duration { return slices.Min(d) }
	key := func(name string) string { return strings.NewReplacer(" ", "-", ",", "").Replace(name) }
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-22s %8s %9s %11s %9s %9s %11s %9s %9s\n", "GetMetadataDelta", "extents",
		"median", "extents/s", "vs floor", "best", "extents/s", "vs floor", "CPU")
	for p, pa := range paths {
		bt, mt := best(times[p]), median(times[p])
		vsMedian, vsBest := "(floor)", "(floor)"
		if p > 0 {
			rm, rb := medianF(ratios[p]), best(times[0]).Seconds()/bt.Seconds()
			vsMedian, vsBest = fmt.Sprintf("%.2fx", rm), fmt.Sprintf("%.2fx", rb)
			b.ReportMetric(rm, key(pa.name)+"/floor")
			b.ReportMetric(rb, key(pa.name)+"/floor-best")
		}
		fmt.Fprintf(&sb, "%-22s %8d %9v %11.0f %9s %9v %11.0f %9s %9v\n", pa.name, benchExtents,
			mt.Round(time.Millisecond), rate(mt), vsMedian, bt.Round(time.Millisecond), rate(bt), vsBest, median(cpu[p]).Round(time.Millisecond))
		b.ReportMetric(rate(mt), key(pa.name)+"-extents/s")
	}
	fmt.Fprintf(&sb, "vs floor: median of each round's ratio to that round's floor (robust to the shared\n")
	fmt.Fprintf(&sb, "machine's drift); best: fastest of %d rounds against the fastest floor; CPU: this\n", benchRounds)
	fmt.Fprintf(&sb, "process's CPU time per stream (server and client alike), median\n")
	fmt.Fprintf(&sb, "RSS before %.1f MiB, after %d rounds of %d extents per path %.1f MiB\n", rssBefore, benchRounds, benchExtents, rssAfter)
	b.Log(sb.String())
	b.ReportMetric(rssBefore, "rss-before-MiB")
	b.ReportMetric(rssAfter, "rss-after-MiB")
}

func medianF(f []float64) float64 {
	s := append([]float64{}, f...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// staticKube admits every caller and knows one VolumeSnapshot.
type staticKube struct {
	handle  string
	secrets map[string]string
}

func (k staticKube) Authenticate(context.Context, string) (authnv1.UserInfo, error) {
	return authnv1.UserInfo{Username: "bench"}, nil
}

func (k staticKube) Authorize(context.Context, authnv1.UserInfo, string) error { return nil }

func (k staticKube) Snapshot(context.Context, string, string) (string, map[string]string, error) {
	return k.handle, k.secrets, nil
}

// tlsPath serves the Kubernetes-facing API on TLS and returns a run of GetMetadataDelta
// through it.
func tlsPath(b *testing.B, e *env, base, target volid.RBDSnapshot) func() (int, time.Duration) {
	ca := kubetest.NewCA(b)
	certFile, keyFile := keyPairFiles(b, ca, "bench")
	srv, err := NewTLSServer("127.0.0.1:0", certFile, keyFile,
		NewKubeServer(e.engine, staticKube{handle: target.String(), secrets: e.cl.Secrets()}, Limits{}), server.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	b.Cleanup(func() { srv.Shutdown(5 * time.Second) })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	cc, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	client := api.NewSnapshotMetadataClient(cc)
	return func() (int, time.Duration) {
		t0 := time.Now()
		st, err := client.GetMetadataDelta(context.Background(), &api.GetMetadataDeltaRequest{
			SecurityToken: "t", Namespace: "ns", BaseSnapshotId: base.String(), TargetSnapshotName: "s"})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			r, err := st.Recv()
			if err == io.EOF {
				return n, time.Since(t0)
			}
			if err != nil {
				b.Fatal(err)
			}
			n += len(r.GetBlockMetadata())
		}
	}
}

// countDelta streams a delta and counts its extents without keeping them.
func countDelta(c csi.SnapshotMetadataClient, base, target volid.RBDSnapshot, secrets map[string]string) (int, error) {
	st, err := c.GetMetadataDelta(context.Background(), &csi.GetMetadataDeltaRequest{
		BaseSnapshotId: base.String(), TargetSnapshotId: target.String(), Secrets: secrets})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += len(r.GetBlockMetadata())
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration{}, d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// vmRSS is the process's resident memory in MiB.
func vmRSS(t testing.TB) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// cpuTime is the CPU time this process has used.
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
