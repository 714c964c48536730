package node

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// TestStageLatency measures stage and unstage of an already formatted volume with the fuse
// mounter (rbd-fuse start, cluster connection, loop device, fsck, mount), the cost a pod start
// pays on this node. It logs the numbers; it does not judge them.
func TestStageLatency(t *testing.T) {
	const rounds = 10
	for _, tc := range []struct {
		name string
		vc   *csi.VolumeCapability
	}{{"ext4", mountCap("ext4", rwo)}, {"block", blockCap(rwo)}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			img := r.image("", 64*mib)
			vol := "vol-" + img.Name
			staging := filepath.Join(r.workspace(vol), "staging")
			if err := r.stage(vol, staging, img, tc.vc); err != nil { // formats
				t.Fatal(err)
			}
			if err := r.unstage(vol, staging); err != nil {
				t.Fatal(err)
			}
			var stage, unstage []time.Duration
			for range rounds {
				start := time.Now()
				if err := r.stage(vol, staging, img, tc.vc); err != nil {
					t.Fatal(err)
				}
				stage = append(stage, time.Since(start))
				start = time.Now()
				if err := r.unstage(vol, staging); err != nil {
					t.Fatal(err)
				}
				unstage = append(unstage, time.Since(start))
			}
			t.Logf("fuse %s over %d rounds: stage p50 %v p90 %v, unstage p50 %v p90 %v",
				tc.name, rounds, pct(stage, 50), pct(stage, 90), pct(unstage, 50), pct(unstage, 90))
		})
	}
}

func pct(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)*p/100].Round(time.Millisecond)
}
