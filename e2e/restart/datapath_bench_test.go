package restart

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
)

// Environment of BenchmarkDataPath.
const (
	// benchJobTimeEnv is each fio job's measured time (a Go duration, whole seconds).
	benchJobTimeEnv = "MONOCEPH_BENCH_JOB_TIME"
	// benchImageSizeEnv is the size of every image in bytes; fio uses the first half of each.
	benchImageSizeEnv = "MONOCEPH_BENCH_IMAGE_SIZE"
)

// BenchmarkDataPath measures the RBD FUSE data path: fio on a volume staged through the real
// node plugin and mount holder (the binaries in containers of their own, as the chart runs
// them), as a raw block device and as a file on ext4, next to the floor measured in the same
// run: fio's rbd engine (librbd in fio's own process) on an image made by the same controller
// with the same size and features. Each job runs on the three targets back to back, so load
// from elsewhere on the machine falls on all three alike. Besides throughput and latency it
// reports the CPU time per I/O of fio and of the FUSE server process, and the server's context
// switches per I/O (kernel work done in loop and kworker threads is in neither).
func BenchmarkDataPath(b *testing.B) {
	if _, err := exec.LookPath("fio"); err != nil {
		b.Fatalf("fio (scripts/install-deps.sh installs it): %v", err)
	}
	r := newRig(b)
	v1, _ := binaries(b)
	size := envInt(b, benchImageSizeEnv, 1<<30)
	runtime := envDuration(b, benchJobTimeEnv, 10*time.Second)

	var server *container
	if r.holder {
		server = r.startHolder("rbd", v1)
	}
	n := r.startNode("rbd", v1)
	if server == nil {
		server = n.c // without a holder the node plugin serves the FUSE files
	}
	pid := server.initPID()
	floor := r.createVolume("rbd", size)
	block := r.createVolume("rbd", size)
	block.cap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: block.cap.AccessMode}
	fs := r.createVolume("rbd", size)
	for _, v := range []*volume{block, fs} {
		r.mustStagePublish(n, v)
	}
	targets := []fioTarget{
		{name: "librbd (floor)", image: floor.context[volumecontext.ImageName]},
		{name: "block", file: block.target},
		{name: "ext4", file: filepath.Join(fs.target, "fio.dat")},
	}
	ctx := context.Background()
	ioSize := size / 2
	for _, t := range targets {
		if _, err := runFio(ctx, prefill, t, ioSize, 0); err != nil {
			b.Fatal(err)
		}
	}
	results := make([][]fioResult, len(fioJobs))
	for i, j := range fioJobs {
		for _, t := range targets {
			res, err := measure(ctx, j, t, ioSize, runtime, pid, t.image == "")
			if err != nil {
				b.Fatal(err)
			}
			results[i] = append(results[i], res)
		}
	}
	reportDataPath(b, targets, results)
	for _, v := range []*volume{block, fs} {
		r.mustUnpublishUnstage(n, v)
	}
}

// measure runs j on t and, with served, samples the FUSE server process around it.
func measure(ctx context.Context, j fioJob, t fioTarget, size int64, runtime time.Duration, pid int, served bool) (fioResult, error) {
	before, err := readUsage(pid)
	if err != nil {
		return fioResult{}, fmt.Errorf("FUSE server process: %w", err)
	}
	res, err := runFio(ctx, j, t, size, runtime)
	if err != nil || !served {
		return res, err
	}
	after, err := readUsage(pid)
	if err != nil {
		return fioResult{}, fmt.Errorf("FUSE server process: %w", err)
	}
	res.serverCPU, res.serverSwitch, res.serverMeasure = after.cpu-before.cpu, after.switches-before.switches, true
	return res, nil
}

// reportDataPath prints one row per job and target: throughput (or p50/p99 latency), the ratio
// to the floor (higher is better: throughput over the floor's, or the floor's latency over
// this one's), and CPU and context switches per I/O; the ratios go out as benchmark metrics.
func reportDataPath(b *testing.B, targets []fioTarget, results [][]fioResult) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-27s %-15s %19s %9s %13s %13s %11s\n", "job", "target", "result", "vs floor", "fio cpu µs/io", "srv cpu µs/io", "srv cs/io")
	for i, j := range fioJobs {
		floor := results[i][0]
		for k, t := range targets {
			res := results[i][k]
			var value string
			var ratio float64
			switch {
			case j.latency:
				value = fmt.Sprintf("p50 %v p99 %v", res.p50.Round(time.Microsecond), res.p99.Round(time.Microsecond))
				ratio = float64(floor.p50) / float64(res.p50)
			case j.bs == "1m":
				value = fmt.Sprintf("%.0f MiB/s", res.mibps)
				ratio = res.mibps / floor.mibps
			default:
				value = fmt.Sprintf("%.0f IOPS", res.iops)
				ratio = res.iops / floor.iops
			}
			vs, srvCPU, srvCS := "(floor)", "-", "-"
			if k > 0 {
				vs = fmt.Sprintf("%.2fx", ratio)
				b.ReportMetric(ratio, metricKey(j.name+" "+t.name)+"/floor")
			}
			if res.serverMeasure && res.ios > 0 {
				srvCPU = fmt.Sprintf("%.1f", float64(res.serverCPU.Microseconds())/res.ios)
				srvCS = fmt.Sprintf("%.2f", res.serverSwitch/res.ios)
			}
			fmt.Fprintf(&sb, "%-27s %-15s %19s %9s %13.1f %13s %11s\n", j.name, t.name, value, vs,
				float64(res.cpu.Microseconds())/max(res.ios, 1), srvCPU, srvCS)
		}
	}
	// on stdout, not b.Log: the testing package keeps only the first lines of a benchmark's log
	fmt.Print(sb.String())
}

func metricKey(name string) string {
	return strings.NewReplacer(" ", "-", "/", "-", "(", "", ")", "").Replace(name)
}

func envInt(b *testing.B, key string, def int64) int64 {
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 64<<20 {
		b.Fatalf("%s=%q: want a size in bytes, at least 64 MiB", key, s)
	}
	return n
}

func envDuration(b *testing.B, key string, def time.Duration) time.Duration {
	s := os.Getenv(key)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		b.Fatalf("%s=%q: want a duration of at least 1s", key, s)
	}
	return d
}
