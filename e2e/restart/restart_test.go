package restart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/hostmount"
)

// observe is how long the proofs watch the writers after a restart.
const observe = 60 * time.Second

// TestPluginRestart: pods write and fsync every 100 ms to a CephFS volume and to ext4 on an
// RBD volume (fuse mounter), each in a mount namespace of its own with the publish target
// bound in (mountPropagation None, the default). Both node plugins are killed (kill -9 of
// each container's process group, all it runs dies with it) and a newly built binary is
// started in their place. Over the next 60 s the writers see no error, the CephFS volume keeps
// its MDS session (the same ceph-fuse client) and the RBD volume its loop device; the new
// plugins answer for both volumes, staging and publishing again changes nothing, and unstaging
// leaves nothing behind.
func TestPluginRestart(t *testing.T) {
	r := newRig(t)
	v1, v2 := binaries(t)
	types := []string{"rbd", "cephfs"}
	if r.holder {
		for _, typ := range types {
			r.startHolder(typ, v1)
		}
	}
	nodes := map[string]*node{}
	vols := map[string]*volume{}
	for _, typ := range types {
		nodes[typ] = r.startNode(typ, v1)
		vols[typ] = r.createVolume(typ, 256<<20)
		r.mustStagePublish(nodes[typ], vols[typ])
	}
	loop := r.loopDevice(vols["rbd"])
	session, daemons, err := r.mdsSession(vols["cephfs"])
	if err != nil {
		t.Fatal(err)
	}
	writers := map[string]*writer{}
	for _, typ := range types {
		writers[typ] = r.startWriter(typ, vols[typ], "private")
	}
	for _, w := range writers {
		w.waitOK(t, 10, 30*time.Second)
	}

	killed := time.Now()
	for _, typ := range types {
		nodes[typ].c.kill()
	}
	for _, typ := range types {
		nodes[typ] = r.startNode(typ, v2)
		if got := nodes[typ].version(t); got != "restart-v2" {
			t.Fatalf("%s node plugin after the restart is %s, want restart-v2", typ, got)
		}
	}
	t.Logf("node plugins killed and the new binary serving after %v", time.Since(killed).Round(time.Millisecond))

	// while the writers go on, the new plugins take the volumes on
	for deadline := killed.Add(observe); time.Now().Before(deadline); time.Sleep(5 * time.Second) {
		for _, typ := range types {
			if reason := r.health(nodes[typ], vols[typ]); reason != "" {
				t.Errorf("%s volume health after the plugin restart: %s", typ, reason)
			}
		}
		if t.Failed() {
			break
		}
	}
	for _, typ := range types {
		rep := writers[typ].report(killed)
		t.Logf("%s writer over %v after the kill: %d writes, %d errors, longest pause %v", typ, observe, rep.oks, rep.errs, rep.longest.Round(time.Millisecond))
		if rep.errs > 0 {
			t.Errorf("%s writer saw %d write errors after the plugin was killed, the first: %s", typ, rep.errs, rep.firstErr)
		}
		if rep.oks < int(observe/writeEvery)/2 {
			t.Errorf("%s writer wrote only %d records in %v", typ, rep.oks, observe)
		}
	}
	if got, n, err := r.mdsSession(vols["cephfs"]); err != nil || got != session || n != daemons {
		t.Errorf("CephFS MDS session after the restart: client %d (%d daemons, %v), before client %d (%d daemons)", got, n, err, session, daemons)
	} else {
		t.Logf("CephFS volume kept MDS session client.%d", session)
	}
	if got := r.loopDevice(vols["rbd"]); got != loop {
		t.Errorf("RBD volume on %s after the restart, before on %s", got, loop)
	} else {
		t.Logf("RBD volume kept loop device %s", loop)
	}
	if t.Failed() {
		return
	}
	// the CO repeats what it did: nothing changes
	for _, typ := range types {
		r.mustStagePublish(nodes[typ], vols[typ])
	}
	for _, typ := range types {
		writers[typ].stop()
		writers[typ].verify(t, vols[typ])
		r.mustUnpublishUnstage(nodes[typ], vols[typ])
	}
	r.assertNothingLeft(vols["rbd"], vols["cephfs"])
}

// TestHolderRestart: the mount holders restart under the writers, first as an upgrade does
// (SIGTERM, the new holder taking over as the old one lets go), then as a crash does (kill -9).
// The RBD writer (mountPropagation None) sees no error: the loop device stays, its I/O waits
// while the node plugin keeps the FUSE connection and resumes with the new holder. The CephFS
// writer (mountPropagation HostToContainer) sees its file fail while ceph-fuse is down, and
// writes again, on the same path, once the node plugin has mounted it again. Every record
// written before is in the volumes afterwards, and unstaging leaves no process, mount or loop
// device.
func TestHolderRestart(t *testing.T) {
	r := newRig(t)
	if !r.holder {
		t.Skip("no mount holder in this run")
	}
	v1, v2 := binaries(t)
	types := []string{"rbd", "cephfs"}
	holders := map[string]*container{}
	nodes := map[string]*node{}
	vols := map[string]*volume{}
	for _, typ := range types {
		holders[typ] = r.startHolder(typ, v1)
		nodes[typ] = r.startNode(typ, v1)
		vols[typ] = r.createVolume(typ, 256<<20)
		r.mustStagePublish(nodes[typ], vols[typ])
	}
	loop := r.loopDevice(vols["rbd"])
	writers := map[string]*writer{
		"rbd":    r.startWriter("rbd", vols["rbd"], "private"),
		"cephfs": r.startWriter("cephfs", vols["cephfs"], "slave"),
	}

	for _, restart := range []struct {
		name string
		stop func(c *container)
	}{
		{"upgrade (SIGTERM)", func(c *container) { c.stop(t, time.Minute) }},
		{"crash (kill -9)", func(c *container) { c.kill() }},
	} {
		for _, w := range writers {
			w.waitOK(t, 10, 2*time.Minute)
		}
		stopped := time.Now()
		var wg sync.WaitGroup
		for _, typ := range types {
			wg.Go(func() { restart.stop(holders[typ]) })
		}
		wg.Wait()
		down := time.Since(stopped)
		for _, typ := range types {
			holders[typ] = r.startHolder(typ, v2)
		}
		for _, w := range writers {
			w.waitOK(t, 20, 3*time.Minute)
		}
		for _, typ := range types {
			rep := writers[typ].report(stopped)
			t.Logf("%s, %s: holder down %v; the writer resumed %v after the stop, %d errors meanwhile, longest pause between two writes %v",
				restart.name, typ, down.Round(time.Millisecond), rep.resumed.Round(time.Millisecond), rep.errs, rep.longest.Round(time.Millisecond))
			if typ == "rbd" && rep.errs > 0 {
				t.Errorf("%s: the RBD writer saw %d errors, the first: %s", restart.name, rep.errs, rep.firstErr)
			}
		}
		if got := r.loopDevice(vols["rbd"]); got != loop {
			t.Errorf("%s: RBD volume on %s, before on %s", restart.name, got, loop)
		}
		if t.Failed() {
			return
		}
	}
	for _, typ := range types {
		writers[typ].stop()
		writers[typ].verify(t, vols[typ])
		if reason := r.health(nodes[typ], vols[typ]); reason != "" {
			t.Errorf("%s volume health after the holder restarts: %s", typ, reason)
		}
		r.mustUnpublishUnstage(nodes[typ], vols[typ])
	}
	r.assertNothingLeft(vols["rbd"], vols["cephfs"])
}

// health is the volume's health reason ("" when healthy) as the node plugin reports it.
func (r *rig) health(n *node, v *volume) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := n.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumePublishPath: v.target})
	if err != nil {
		return err.Error()
	}
	if e := h.GetVolumeHealth().GetHealthStatuses(); len(e) > 0 {
		return e[0].GetReason() + ": " + e[0].GetMessage()
	}
	return ""
}

func (r *rig) mustUnpublishUnstage(n *node, v *volume) {
	r.t.Helper()
	var dev string // the staged filesystem's device, to name who still holds it
	if m, err := hostmount.MountAt(v.staging); err == nil && m != nil {
		dev = fmt.Sprintf("%d:%d", m.Major, m.Minor)
	}
	if err := r.unpublish(n, v); err != nil {
		r.t.Fatalf("unpublish %s: %v", v.typ, err)
	}
	if err := r.unstageAsCO(n, v); err != nil {
		r.t.Fatalf("unstage %s: %v (mounts of device %s still in: %s)", v.typ, err, dev, mountHolders(dev))
	}
}

// unstageAsCO unstages v, retrying for up to a minute, as the kubelet does, while the answer
// is that the loop device is still open: on a shared machine any process that unshares its
// mounts while the volume is mounted (another test's pod, a build) holds a copy of the
// filesystem until it exits, and unstage rightly refuses to detach under it.
func (r *rig) unstageAsCO(n *node, v *volume) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := r.asCO(func() error { return r.unstage(n, v) })
		if err == nil || !strings.Contains(err.Error(), "still open") || time.Now().After(deadline) {
			return err
		}
		r.t.Logf("unstage %s: %v; retrying", v.typ, err)
		time.Sleep(2 * time.Second)
	}
}

// mountHolders lists the mount namespaces (by a process in each) that still have a mount of
// device dev (major:minor), for failure messages.
func mountHolders(dev string) string {
	if dev == "" {
		return "none"
	}
	var out []string
	seen := map[string]bool{}
	infos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, p := range infos {
		pid := filepath.Dir(p)
		ns, _ := os.Readlink(filepath.Join(pid, "ns/mnt"))
		if ns == "" || seen[ns] {
			continue
		}
		seen[ns] = true
		b, _ := os.ReadFile(p)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[2] == dev {
				cmd, _ := os.ReadFile(filepath.Join(pid, "cmdline"))
				out = append(out, fmt.Sprintf("%s %s [%s] at %s", pid, ns, strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " ")), f[4]))
				break
			}
		}
	}
	return strings.Join(out, "; ")
}
