package rbd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
)

// TestQoSOnLiveRBDFuse: the QoS of a VolumeAttributesClass is enforced by librbd in the client
// that has the image open, so it holds for the fuse mounter, and ControllerModifyVolume
// changes it on a volume in use, without reattaching. Rates are 4 KiB direct writes through
// the FUSE file: the limit is an upper bound librbd enforces (the machine can only be slower), and the
// unlimited rate only has to be well above it.
func TestQoSOnLiveRBDFuse(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for FUSE")
	}
	e := newEnv(t)
	ctx := ctxT(t)
	req := e.createReq("qos-live", 64<<20, nil)
	req.MutableParameters = map[string]string{"qosWriteIopsLimit": "100"}
	vol, err := e.client.CreateVolume(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	t.Cleanup(func() {
		_, _ = e.client.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()})
	})
	image := rbdname.Image(mustVol(t, id).UID)
	pool := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(pool.Close)
	f := attach.NewFuse(hostexec.New(time.Minute), pool)
	t.Cleanup(func() { f.Shutdown(context.Background()) })
	work := filepath.Join(t.TempDir(), "0123456789abcdef")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := f.Attach(ctx, attach.Request{Image: attach.Image{Pool: e.cl.RBDPool, Namespace: e.ns, Name: image},
		MonHost: e.cl.Monitors, Cred: e.cl.Admin, WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Detach(context.Background(), a); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	file, err := attach.ImageFile(a)
	if err != nil {
		t.Fatal(err)
	}

	// rate writes n 4 KiB blocks with O_DIRECT after draining librbd's token bucket (it starts
	// full, with a second's worth of the limit) and returns writes per second.
	rate := func(n int) float64 {
		t.Helper()
		dd := func(count int) time.Duration {
			start := time.Now()
			out, err := exec.Command("dd", "if=/dev/zero", "of="+file, "bs=4k", fmt.Sprintf("count=%d", count),
				"oflag=direct", "conv=notrunc").CombinedOutput()
			if err != nil {
				t.Fatalf("dd: %v\n%s", err, out)
			}
			return time.Since(start)
		}
		dd(150)
		return float64(n) / dd(n).Seconds()
	}
	modify := func(params map[string]string) {
		t.Helper()
		if _, err := e.client.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: params, Secrets: e.cl.Secrets()}); err != nil {
			t.Fatal(err)
		}
	}
	// eventually measures until the rate is what ok wants: an open handle applies a changed
	// configuration when librbd's header watch delivers the change, within about a second on
	// an idle machine but later on a loaded one (a fixed wait bets on the load). A change that never
	// reaches the open handle still fails, after a deadline far above any delivery time.
	eventually := func(what string, n int, ok func(float64) bool) float64 {
		t.Helper()
		deadline := time.Now().Add(45 * time.Second)
		for {
			r := rate(n)
			if ok(r) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %.0f writes/s after %v", what, r, 45*time.Second)
			}
			t.Logf("%s: %.0f writes/s, not yet", what, r)
		}
	}

	if r := rate(300); r > 120 {
		t.Fatalf("with qosWriteIopsLimit=100 from CreateVolume: %.0f writes/s", r)
	} else {
		t.Logf("limited at create: %.0f writes/s", r)
	}
	modify(map[string]string{}) // a class without limits
	t.Logf("unlimited: %.0f writes/s", eventually("after ModifyVolume to no limits (want well above 100)", 600,
		func(r float64) bool { return r > 250 }))
	modify(map[string]string{"qosIopsLimit": "50"})
	t.Logf("limited by ModifyVolume: %.0f writes/s", eventually("after ModifyVolume to qosIopsLimit=50", 150,
		func(r float64) bool { return r <= 60 }))
}
