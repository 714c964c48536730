package restart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// fioJob is one fio workload of the data-path benchmark.
type fioJob struct {
	name    string
	rw      string // fio's --rw
	bs      string
	depth   int
	mixRead int  // --rwmixread for randrw
	latency bool // reported as p50/p99 completion latency instead of throughput
}

// prefill writes every byte of a target once before the timed jobs: reads then find
// allocated objects (librbd answers reads of objects its object map says do not exist with
// zeros, without asking an OSD: reads of a fresh image would flatter the floor), and fio lays
// out its file in the filesystem.
var prefill = fioJob{name: "prefill", rw: "write", bs: "1m", depth: 8}

// fioJobs run in this order on every target.
var fioJobs = []fioJob{
	{name: "1 MiB seq write QD8", rw: "write", bs: "1m", depth: 8},
	{name: "4 KiB rand write QD32", rw: "randwrite", bs: "4k", depth: 32},
	{name: "4 KiB rand read QD32", rw: "randread", bs: "4k", depth: 32},
	{name: "1 MiB seq read QD8", rw: "read", bs: "1m", depth: 8},
	{name: "4 KiB rand write QD1", rw: "randwrite", bs: "4k", depth: 1, latency: true},
	{name: "4 KiB rand read QD1", rw: "randread", bs: "4k", depth: 1, latency: true},
	{name: "4 KiB 70/30 rand r/w QD32", rw: "randrw", bs: "4k", depth: 32, mixRead: 70},
}

// fioTarget says where fio does its I/O: fio's rbd engine on an image (librbd in fio's own
// process: the floor), or libaio with O_DIRECT on a block device or a file.
type fioTarget struct {
	name  string
	image string // rbd engine on this image of the test pool
	file  string // else libaio on this file or device
}

// fioResult is what one job did.
type fioResult struct {
	iops, mibps   float64
	p50, p99      time.Duration // completion latency, of reads where the job reads
	ios           float64       // I/Os completed
	cpu           time.Duration // fio's user + system CPU time, all its threads and processes
	runtime       time.Duration
	serverCPU     time.Duration // of the FUSE server process, when there is one
	serverSwitch  float64
	serverMeasure bool
}

// args are fio's arguments for job on t: size bounds the offsets (the same on every target,
// so they read and write the same amount of data), runtime is each job's measured time.
func (j fioJob) args(t fioTarget, size int64, runtime time.Duration) []string {
	a := []string{"--name=" + strings.ReplaceAll(j.name, " ", "_"), "--output-format=json",
		"--rw=" + j.rw, "--bs=" + j.bs, "--iodepth=" + strconv.Itoa(j.depth),
		"--size=" + strconv.FormatInt(size, 10), "--randrepeat=0", "--norandommap"}
	if runtime > 0 {
		// no ramp time: the FUSE server's CPU time is sampled around the whole run
		a = append(a, "--time_based", "--runtime="+strconv.Itoa(int(runtime.Seconds())))
	}
	if j.mixRead > 0 {
		a = append(a, "--rwmixread="+strconv.Itoa(j.mixRead))
	}
	if t.image != "" {
		return append(a, "--ioengine=rbd", "--clientname=admin", "--pool="+benchPool(), "--rbdname="+t.image)
	}
	return append(a, "--ioengine=libaio", "--direct=1", "--filename="+t.file)
}

func benchPool() string {
	if p := os.Getenv("CEPH_RBD_POOL"); p != "" {
		return p
	}
	return "rbd"
}

// runFio runs job on t (runtime 0: once over size), bounded by the job's runtime and two
// minutes more.
func runFio(ctx context.Context, j fioJob, t fioTarget, size int64, runtime time.Duration) (fioResult, error) {
	ctx, cancel := context.WithTimeout(ctx, runtime+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "fio", j.args(t, size, runtime)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fioResult{}, fmt.Errorf("fio %s on %s: %v: %s", j.name, t.name, err, stderr.Bytes())
	}
	res, err := parseFio(out)
	// fio's own report covers its job thread only; the process's rusage has librbd's threads
	// too (the floor's client work) and that of the job process fio waited for
	res.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return res, err
}

// fioOutput is the part of fio's JSON output read here.
type fioOutput struct {
	Jobs []struct {
		Read, Write fioDir
	} `json:"jobs"`
}

type fioDir struct {
	IOPS     float64 `json:"iops"`
	BWBytes  float64 `json:"bw_bytes"`
	TotalIOs float64 `json:"total_ios"`
	Runtime  float64 `json:"runtime"` // ms
	Clat     struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

// parseFio reads fio's JSON output (fio may print notes before it).
func parseFio(out []byte) (fioResult, error) {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var o fioOutput
	if err := json.Unmarshal(out, &o); err != nil || len(o.Jobs) != 1 {
		return fioResult{}, fmt.Errorf("fio output (%v): %.300s", err, out)
	}
	j := o.Jobs[0]
	lat := j.Read
	if lat.TotalIOs == 0 {
		lat = j.Write
	}
	rt := time.Duration(max(j.Read.Runtime, j.Write.Runtime)) * time.Millisecond
	pct := func(p string) time.Duration { return time.Duration(lat.Clat.Percentile[p]) }
	return fioResult{
		iops:  j.Read.IOPS + j.Write.IOPS,
		mibps: (j.Read.BWBytes + j.Write.BWBytes) / (1 << 20),
		p50:   pct("50.000000"), p99: pct("99.000000"),
		ios:     j.Read.TotalIOs + j.Write.TotalIOs,
		runtime: rt,
	}, nil
}
