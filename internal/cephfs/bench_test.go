package cephfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/benchstat"
)

// BenchmarkCreateDeleteVolume measures CreateVolume and DeleteVolume through the CSI socket,
// sequentially and with 16 concurrent callers, against the floor measured in the same run: the
// volumes module's own `fs subvolume create` and `rm` through the library on an open connection.
func BenchmarkCreateDeleteVolume(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const n = 40
	if err := e.fsa.CreateSubVolumeGroup(e.cl.FSName, e.group, nil); err != nil {
		b.Fatal(err)
	}
	floor := func(conc int) (benchstat.Row, benchstat.Row) {
		c, cw, err := benchstat.Run(n, conc, func(i int) error {
			return e.fsa.CreateSubVolume(e.cl.FSName, e.group, fmt.Sprintf("floor-%d-%d", conc, i), &admin.SubVolumeOptions{Size: 64 << 20})
		})
		if err != nil {
			b.Fatal(err)
		}
		r, rw, err := benchstat.Run(n, conc, func(i int) error {
			return e.fsa.RemoveSubVolume(e.cl.FSName, e.group, fmt.Sprintf("floor-%d-%d", conc, i))
		})
		if err != nil {
			b.Fatal(err)
		}
		return benchstat.Row{Name: fmt.Sprintf("subvolume create x%d", conc), Samples: c, Wall: cw},
			benchstat.Row{Name: fmt.Sprintf("subvolume rm x%d", conc), Samples: r, Wall: rw}
	}
	run := func(prefix string, conc int) (benchstat.Row, benchstat.Row) {
		ids := make([]string, n)
		c, cw, err := benchstat.Run(n, conc, func(i int) error {
			r, err := e.client.CreateVolume(ctx, e.createReq(fmt.Sprintf("%s-%d", prefix, i), 64<<20, rwx, nil))
			if err == nil {
				ids[i] = r.GetVolume().GetVolumeId()
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		d, dw, err := benchstat.Run(n, conc, func(i int) error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ids[i], Secrets: e.cl.Secrets()})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return benchstat.Row{Name: fmt.Sprintf("CreateVolume x%d", conc), Samples: c, Wall: cw},
			benchstat.Row{Name: fmt.Sprintf("DeleteVolume x%d", conc), Samples: d, Wall: dw}
	}
	b.ResetTimer()
	fc1, fr1 := floor(1)
	c1, d1 := run("seq", 1)
	fc16, fr16 := floor(16)
	c16, d16 := run("par", 16)
	b.StopTimer()
	c1.Floor, d1.Floor, c16.Floor, d16.Floor = &fc1, &fr1, &fc16, &fr16
	benchstat.Report(b, fc1, c1, fr1, d1, fc16, c16, fr16, d16)
}

// BenchmarkShallowVsClone times a shallow read-only volume against a full clone (the same
// request with backingSnapshot "false", retried until the copy is done) of a snapshot holding
// 64 MiB and 512 MiB.
func BenchmarkShallowVsClone(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	root := mountRoot(b)
	var rows []benchstat.Row
	for _, size := range []int{64, 512} {
		src := e.create(b, e.createReq(fmt.Sprintf("src-%d", size), int64(size+64)*mib, rwx, nil))
		dir := filepath.Join(root, src.GetVolumeContext()["rootPath"])
		chunk := make([]byte, 4*mib)
		for i := range size / 4 {
			chunk[0] = byte(i)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), chunk, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		snap, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("snap-%d", size), SourceVolumeId: src.GetVolumeId(), Secrets: e.cl.Secrets()})
		if err != nil {
			b.Fatal(err)
		}
		sid := snap.GetSnapshot().GetSnapshotId()
		shallow, sw, err := benchstat.Run(5, 1, func(i int) error {
			_, err := e.client.CreateVolume(ctx, e.createReq(fmt.Sprintf("shallow-%d-%d", size, i), mib, rox, snapSource(sid)))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		full, fw, err := benchstat.Run(2, 1, func(i int) error {
			e.create(b, e.createReq(fmt.Sprintf("full-%d-%d", size, i), int64(size+64)*mib, rox, snapSource(sid), "backingSnapshot", "false"))
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		fullRow := benchstat.Row{Name: fmt.Sprintf("full clone %d MiB", size), Samples: full, Wall: fw}
		rows = append(rows, fullRow, benchstat.Row{Name: fmt.Sprintf("shallow %d MiB", size), Samples: shallow, Wall: sw, Floor: &fullRow})
		b.ReportMetric(float64(full.Percentile(50))/float64(shallow.Percentile(50)), fmt.Sprintf("clone/shallow-%dMiB", size))
	}
	b.Logf("shallow p50 grows %.2fx from 64 to 512 MiB; full clone p50 grows %.2fx",
		float64(rows[3].Samples.Percentile(50))/float64(rows[1].Samples.Percentile(50)),
		float64(rows[2].Samples.Percentile(50))/float64(rows[0].Samples.Percentile(50)))
	benchstat.Report(b, rows...)
}
