package restart

import (
	"fmt"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/faultpoint"
)

// TestPluginKilledDuringStageUnstage: the node plugin dies (its whole container, as kill -9
// does) at each point of stage and unstage between changing the node and recording it. A new
// plugin then completes the CO's retry of the same call, the volume works, and unstaging leaves
// no process, mount or loop device. The mount holder, which owns the mounts, lives on.
func TestPluginKilledDuringStageUnstage(t *testing.T) {
	r := newRig(t)
	v1, _ := binaries(t)
	for _, c := range []struct {
		typ, point string
		unstage    bool // the point is in unstage (else stage)
	}{
		{"rbd", "rbd.NodeStageVolume.attached", false},
		{"rbd", "rbd.NodeStageVolume.mounted", false},
		{"rbd", "rbd.NodeUnstageVolume.unmounted", true},
		{"rbd", "rbd.NodeUnstageVolume.detached", true},
		{"cephfs", "cephfs.NodeStageVolume.mounted", false},
		{"cephfs", "cephfs.NodeUnstageVolume.unmounted", true},
	} {
		t.Run(c.point, func(t *testing.T) {
			r.t = t
			if r.holder {
				h := r.startHolder(c.typ, v1)
				defer h.stop(t, time.Minute)
			}
			v := r.createVolume(c.typ, 64<<20)
			fault := []string{faultpoint.EnvVar + "=" + c.point}
			n := r.startNode(c.typ, v1)
			var callErr error
			if c.unstage {
				r.mustStagePublish(n, v)
				if err := r.unpublish(n, v); err != nil {
					t.Fatal(err)
				}
				n.c.kill()
				n = r.startNode(c.typ, v1, fault...)
				if callErr = r.asCO(func() error { return r.unstage(n, v) }); callErr == nil {
					t.Fatalf("unstage with the plugin dying at %s succeeded", c.point)
				}
			} else {
				n.c.kill()
				n = r.startNode(c.typ, v1, fault...)
				if callErr = r.asCO(func() error { return r.stage(n, v) }); callErr == nil {
					t.Fatalf("stage with the plugin dying at %s succeeded", c.point)
				}
			}
			// bounded: a call that failed before reaching the point leaves the plugin alive
			select {
			case <-n.c.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the plugin did not die at %s; the call answered: %v", c.point, callErr)
			}
			n = r.startNode(c.typ, v1)
			if !c.unstage {
				// the retried stage completes what the dead plugin began
				r.mustStagePublish(n, v)
				w := r.startWriter(fmt.Sprintf("%s-%d", c.typ, r.logs), v, "private")
				w.waitOK(t, 5, 30*time.Second)
				w.stop()
				w.verify(t, v)
				if err := r.unpublish(n, v); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.unstageAsCO(n, v); err != nil {
				t.Fatalf("unstage retried after the plugin died at %s: %v", c.point, err)
			}
			n.c.kill()
			r.assertNothingLeft(v)
		})
	}
}
