package rbd

import (
	"context"
	"fmt"
	"testing"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/benchstat"
)

// BenchmarkCreateDeleteVolume measures CreateVolume and DeleteVolume through the CSI socket,
// sequentially and with 16 concurrent callers, against the floor measured in the same run: a
// raw librbd create and remove of an image with the same features on an open connection.
func BenchmarkCreateDeleteVolume(b *testing.B) {
	e := newEnvIn(b, "")
	ctx := context.Background()
	const n = 100
	opts, err := imageOptions(DefaultImageFeatures, "")
	if err != nil {
		b.Fatal(err)
	}
	defer opts.Destroy()

	floor := func(conc int) (benchstat.Row, benchstat.Row) {
		c, cw, err := benchstat.Run(n, conc, func(i int) error {
			return rbd.CreateImage(e.io, fmt.Sprintf("floor-%d-%d", conc, i), 64<<20, opts)
		})
		if err != nil {
			b.Fatal(err)
		}
		r, rw, err := benchstat.Run(n, conc, func(i int) error { return rbd.RemoveImage(e.io, fmt.Sprintf("floor-%d-%d", conc, i)) })
		if err != nil {
			b.Fatal(err)
		}
		return benchstat.Row{Name: fmt.Sprintf("librbd create x%d", conc), Samples: c, Wall: cw},
			benchstat.Row{Name: fmt.Sprintf("librbd remove x%d", conc), Samples: r, Wall: rw}
	}
	run := func(prefix string, conc int) (benchstat.Row, benchstat.Row) {
		ids := make([]string, n)
		create, cw, err := benchstat.Run(n, conc, func(i int) error {
			r, err := e.client.CreateVolume(ctx, e.createReq(fmt.Sprintf("%s-%d", prefix, i), 64<<20, nil))
			if err == nil {
				ids[i] = r.GetVolume().GetVolumeId()
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		del, dw, err := benchstat.Run(n, conc, func(i int) error {
			_, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: ids[i], Secrets: e.cl.Secrets()})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return benchstat.Row{Name: fmt.Sprintf("CreateVolume x%d", conc), Samples: create, Wall: cw},
			benchstat.Row{Name: fmt.Sprintf("DeleteVolume x%d", conc), Samples: del, Wall: dw}
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
