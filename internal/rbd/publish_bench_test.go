package rbd

import (
	"context"
	"fmt"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/benchstat"
)

// BenchmarkPublishUnpublish measures ControllerPublishVolume and ControllerUnpublishVolume of
// single-node volumes through the CSI socket (what the attacher adds to every pod start and
// stop), against the floor measured in the same run: a raw write and removal of a small RADOS
// object, the least an attachment record costs.
func BenchmarkPublishUnpublish(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const n = 30
	ids := make([]string, n)
	for i := range ids {
		vol, err := e.client.CreateVolume(ctx, e.createReq(fmt.Sprintf("bench-publish-%d", i), 8*mib, nil))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = vol.GetVolume().GetVolumeId()
	}
	defer func() {
		for _, id := range ids {
			_, _ = e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()})
		}
	}()
	snw := capOf(csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, false)
	record := []byte(`{"nodes":{"node-a":{"mode":"SINGLE_NODE_WRITER"}}}`)
	run := func(name string, op func(i int) error) benchstat.Row {
		s, wall, err := benchstat.Run(n, 1, op)
		if err != nil {
			b.Fatal(err)
		}
		return benchstat.Row{Name: name, Samples: s, Wall: wall}
	}

	b.ResetTimer()
	fw := run("rados write", func(i int) error { return e.io.WriteFull(fmt.Sprintf("bench-floor-%d", i), record) })
	fr := run("rados remove", func(i int) error { return e.io.Delete(fmt.Sprintf("bench-floor-%d", i)) })
	pub := run("ControllerPublishVolume", func(i int) error {
		_, err := e.client.ControllerPublishVolume(ctx, e.publishReq(ids[i], "node-a", snw, false))
		return err
	})
	unpub := run("ControllerUnpublishVolume", func(i int) error {
		_, err := e.client.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: ids[i], NodeId: "node-a", Secrets: e.cl.Secrets()})
		return err
	})
	b.StopTimer()
	pub.Floor, unpub.Floor = &fw, &fr
	benchstat.Report(b, fw, pub, fr, unpub)
}
