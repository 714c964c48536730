package rbd

import (
	"context"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/childtest"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scatter writes a little into n objects of image (one per 4 MiB), so that removing it takes
// librbd a while: it deletes object by object.
func (e *env) scatter(t *testing.T, image string, n int) {
	t.Helper()
	img, err := rbd.OpenImage(e.io, image, rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	buf := make([]byte, 512)
	for i := range n {
		if _, err := img.WriteAt(buf, int64(i)<<22); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteUntilDone repeats DeleteVolume as a CO does and checks that whenever it answers OK,
// nothing of the volume is left. It returns the codes of the answers before OK.
func (e *env) deleteUntilDone(t *testing.T, volumeID string, within time.Duration) []codes.Code {
	t.Helper()
	var seen []codes.Code
	deadline := time.Now().Add(within)
	for {
		_, err := e.client.DeleteVolume(ctxT(t), &csi.DeleteVolumeRequest{VolumeId: volumeID, Secrets: e.cl.Secrets()})
		if err == nil {
			left, lerr := cephtest.RBDLeftovers(e.io)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if len(left) != 0 {
				t.Fatalf("DeleteVolume answered OK after %v, but the namespace still holds %v", seen, left)
			}
			return seen
		}
		seen = append(seen, status.Code(err))
		if time.Now().After(deadline) {
			t.Fatalf("DeleteVolume still failing after %v: %v (answers so far %v)", within, err, seen)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestDeleteVolumeAfterKilledRemoval: a client killed in the middle of removing an image (as a
// controller SIGKILLed during DeleteVolume is) leaves it in the RBD trash under the source
// "removing", hidden from rbd_trash_list and unreachable by name; a client that died with the
// image open leaves its watch on it for 30 s, and librbd refuses to resume the removal (EBUSY)
// until then. DeleteVolume must not answer OK until the removal is complete.
func TestDeleteVolumeAfterKilledRemoval(t *testing.T) {
	e := newEnv(t)
	t.Parallel()
	vol, err := e.client.CreateVolume(ctxT(t), e.createReq("killed-removal", 4<<30, nil))
	if err != nil {
		t.Fatal(err)
	}
	image := rbdname.Image(mustVol(t, vol.GetVolume().GetVolumeId()).UID)
	var pending []trashEntry
	for attempt := 0; len(pending) == 0; attempt++ {
		if attempt == 5 {
			t.Fatal("rbd rm finished before it could be killed in the middle, five times")
		}
		if attempt > 0 { // the removal completed: make the image again under the same name
			if err := rbd.CreateImage(e.io, image, 4<<30, rbd.NewRbdImageOptions()); err != nil {
				t.Fatal(err)
			}
		}
		e.scatter(t, image, 1024)
		pending = e.killRemovalInTrash(t, image)
	}
	e.dieHoldingImage(t, pending[0].ID)
	e.deleteUntilDone(t, vol.GetVolume().GetVolumeId(), 90*time.Second)
	e.assertEmpty(t)
}

// killRemovalInTrash starts `rbd rm` of image and SIGKILLs it as soon as librbd has moved the
// image to the trash, before the removal completes. It returns the trash entry, or nothing
// when the removal finished first.
func (e *env) killRemovalInTrash(t *testing.T, image string) []trashEntry {
	t.Helper()
	cmd := exec.Command("rbd", "rm", "--no-progress", "--pool", e.cl.RBDPool, "--namespace", e.ns, image)
	cmd.Env = os.Environ() // CEPH_ARGS from scripts/ceph-local.sh
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("rbd rm: %v", err)
			}
			return nil
		default:
		}
		pending, err := trashedAs(e.io, image, trashSourceRemoving)
		if err != nil {
			t.Fatal(err)
		}
		if len(pending) > 0 {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				return nil // it finished just before the signal
			}
			if pending, err = trashedAs(e.io, image, trashSourceRemoving); err != nil {
				t.Fatal(err)
			}
			return pending
		}
		time.Sleep(time.Millisecond)
	}
}

const holdEnv = "MONOCEPH_RBD_HOLD_IMAGE"

// dieHoldingImage runs a child process that opens the image with ID id for writing (which
// registers a watch) and SIGKILLs it: its watch stays until the OSD expires it.
func (e *env) dieHoldingImage(t *testing.T, id string) {
	t.Helper()
	cmd := childtest.Command(t, "TestHoldImageChild", holdEnv+"="+e.cl.RBDPool+"/"+e.ns+"/"+id)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(out, buf); err != nil || string(buf) != "held\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not open the image: %q %v", buf, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// TestHoldImageChild is the child side of dieHoldingImage; it does nothing in a normal run.
func TestHoldImageChild(t *testing.T) {
	spec := os.Getenv(holdEnv)
	if spec == "" {
		t.Skip("child process of dieHoldingImage only")
	}
	parts := strings.SplitN(spec, "/", 3)
	cl := cephtest.Env(t)
	pool := ceph.NewPool(ceph.PoolOptions{})
	conn, err := pool.Get(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	ioctx, err := conn.Rados().OpenIOContext(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	ioctx.SetNamespace(parts[1])
	if _, err := rbd.OpenImageById(ioctx, parts[2], rbd.NoSnapshot); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("held\n")
	select {}
}

// TestDeleteVolumeAbandonedAtDeadline: a DeleteVolume whose deadline passes while librbd is
// still removing the image returns, but librbd goes on in the background. The CO's retry must
// get ABORTED until that removal ends instead of racing it, and may answer OK only when
// nothing is left.
func TestDeleteVolumeAbandonedAtDeadline(t *testing.T) {
	e := newEnv(t)
	t.Parallel()
	vol, err := e.client.CreateVolume(ctxT(t), e.createReq("abandoned-delete", 4<<30, nil))
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	e.scatter(t, rbdname.Image(mustVol(t, id).UID), 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: e.cl.Secrets()})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("DeleteVolume with a 50 ms deadline: %v, want DeadlineExceeded (is the removal too fast to test?)", err)
	}
	seen := e.deleteUntilDone(t, id, time.Minute)
	if len(seen) == 0 || seen[0] != codes.Aborted {
		t.Fatalf("retries while the abandoned removal ran answered %v, want Aborted first", seen)
	}
	e.assertEmpty(t)
}

// state lists every object of the test namespace with its omap keys, to compare before and
// after requests that must change nothing.
func (e *env) state(t *testing.T, ns string) []string {
	t.Helper()
	io, err := e.conn.Rados().OpenIOContext(e.cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	defer io.Destroy()
	io.SetNamespace(ns)
	var out []string
	var oids []string
	if err := io.ListObjects(func(oid string) { oids = append(oids, oid) }); err != nil {
		t.Fatal(err)
	}
	for _, oid := range oids {
		out = append(out, oid)
		vals, _ := io.GetAllOmapValues(oid, "", "", 10000)
		for k := range vals {
			out = append(out, oid+"/"+k)
		}
	}
	sort.Strings(out)
	return out
}

// TestFailedCreatesLeaveNothing: a create that cannot succeed is refused before anything is
// reserved where that can be checked, and gives its reservation back where only Ceph can tell;
// either way the journal and the pool are left exactly as they were.
func TestFailedCreatesLeaveNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	vol, err := e.client.CreateVolume(ctx, e.createReq("base", 8*mib, nil))
	if err != nil {
		t.Fatal(err)
	}
	base := mustVol(t, vol.GetVolume().GetVolumeId())
	missingVol := base
	missingVol.UID = "aaaaaaaaaaaaaaaa"
	snapOf := func(v volid.RBDVolume) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{
			SnapshotId: volid.RBDSnapshot{RBDVolume: v, SnapUID: "bbbbbbbbbbbbbbbb"}.String()}}}
	}
	volOf := func(v volid.RBDVolume) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.String()}}}
	}
	with := func(k, v string) *csi.CreateVolumeRequest {
		r := e.createReq("doomed", 8*mib, nil)
		r.Parameters[k] = v
		return r
	}
	missingNS := "gone" + e.ns // unique: a namespace no run has ever written into
	before := e.state(t, e.ns)
	tests := []struct {
		name string
		call func() error
		code codes.Code
	}{
		// librbd refuses the size only when it creates the image (EINVAL): the reservation
		// made before must be given back
		{"impossible size", func() error { _, err := e.client.CreateVolume(ctx, e.createReq("huge", 1<<52, nil)); return err }, codes.InvalidArgument},
		{"missing namespace", func() error { _, err := e.client.CreateVolume(ctx, with("radosNamespace", missingNS)); return err }, codes.InvalidArgument},
		{"missing data pool", func() error { _, err := e.client.CreateVolume(ctx, with("dataPool", "nope")); return err }, codes.InvalidArgument},
		{"clone of missing snapshot", func() error {
			_, err := e.client.CreateVolume(ctx, e.createReq("from-missing-snap", 8*mib, snapOf(base)))
			return err
		}, codes.NotFound},
		{"clone of missing volume", func() error {
			_, err := e.client.CreateVolume(ctx, e.createReq("from-missing-vol", 8*mib, volOf(missingVol)))
			return err
		}, codes.NotFound},
		{"snapshot of missing volume", func() error {
			_, err := e.client.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "of-missing", SourceVolumeId: missingVol.String(), Secrets: e.cl.Secrets()})
			return err
		}, codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // a retry of the same request must not leave anything either
				if err := tt.call(); status.Code(err) != tt.code {
					t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.code)
				}
			}
			if after := e.state(t, e.ns); !slices.Equal(before, after) {
				t.Fatalf("the namespace changed:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
	if objs := e.state(t, missingNS); len(objs) != 0 {
		t.Errorf("a request naming a missing RBD namespace wrote into it: %v", objs)
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: base.String(), Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
