package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	groupv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumegroupsnapshot/v1"
	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/monoceph/monoceph/internal/rbd/rbdname"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// counter is one writer storing the same increasing counter in two files, a's first, then b's,
// each write fsynced before the next: at any one point in time a holds b's value or the next.
type counter struct {
	last atomic.Int64
	stop chan struct{}
	done sync.WaitGroup
	err  error
}

func startCounter(a, b string) (*counter, error) {
	var files []*os.File
	for _, p := range []string{a, b} {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	c := &counter{stop: make(chan struct{})}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		for n := int64(1); ; n++ {
			select {
			case <-c.stop:
				return
			default:
			}
			for _, f := range files {
				if _, err := f.WriteAt([]byte(fmt.Sprintf("%20d\n", n)), 0); err != nil {
					c.err = err
					return
				}
				if err := f.Sync(); err != nil {
					c.err = err
					return
				}
			}
			c.last.Store(n)
		}
	}()
	return c, nil
}

// halt stops the writer and returns the last counter both files got.
func (c *counter) halt() (int64, error) {
	close(c.stop)
	c.done.Wait()
	return c.last.Load(), c.err
}

func readCounter(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// stepGroupSnapshot: two PVCs written alternately by one counter, each write fsynced; a
// VolumeGroupSnapshot of both becomes ReadyToUse with two members; Ceph shows one group
// snapshot; volumes restored from the members hold counters of one point in time; the same
// name is idempotent at the driver; deleting the VolumeGroupSnapshot leaves no group, group
// snapshot, image snapshot or journal entry.
func (e *env) stepGroupSnapshot() {
	ctx := context.Background()
	labels := map[string]string{"app.kubernetes.io/part-of": "counter"}
	pvs := map[string]*corev1.PersistentVolume{}
	mounts := map[string]*mounted{}
	for _, name := range []string{"gs-a", "gs-b"} {
		pvs[name] = e.createPVC(claim{name: name, class: "monoceph-rbd", size: "64Mi", mode: corev1.ReadWriteOnce, labels: labels})
		mounts[name] = e.mountPV(pvs[name], false)
	}
	w, err := startCounter(mounts["gs-a"].path("counter"), mounts["gs-b"].path("counter"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(30*time.Second, "the writer running", func() (bool, string) { return w.last.Load() >= 20, fmt.Sprint(w.last.Load()) })

	class := "monoceph-rbd"
	vgs, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(userNS).Create(ctx, &groupv1.VolumeGroupSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: "counter"},
		Spec: groupv1.VolumeGroupSnapshotSpec{VolumeGroupSnapshotClassName: &class,
			Source: groupv1.VolumeGroupSnapshotSource{Selector: &metav1.LabelSelector{MatchLabels: labels}}},
	}, metav1.CreateOptions{})
	if err != nil {
		w.halt()
		e.t.Fatal(err)
	}
	e.waitFor(120*time.Second, "VolumeGroupSnapshot ready", func() (bool, string) {
		vgs, err = e.snap.GroupsnapshotV1().VolumeGroupSnapshots(userNS).Get(ctx, "counter", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st := vgs.Status
		if st == nil || st.ReadyToUse == nil || !*st.ReadyToUse || st.BoundVolumeGroupSnapshotContentName == nil {
			msg := ""
			if st != nil && st.Error != nil && st.Error.Message != nil {
				msg = *st.Error.Message
			}
			return false, fmt.Sprintf("status %+v %s; %s", st, msg, e.eventsOf("counter"))
		}
		return true, ""
	})
	last, err := w.halt()
	if err != nil {
		e.t.Fatalf("writer: %v", err)
	}
	vgsc, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, *vgs.Status.BoundVolumeGroupSnapshotContentName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if vgsc.Status == nil || vgsc.Status.VolumeGroupSnapshotHandle == nil || len(vgsc.Status.VolumeSnapshotInfoList) != 2 {
		e.t.Fatalf("VolumeGroupSnapshotContent status %+v: want a handle and two members", vgsc.Status)
	}
	members := e.groupMembers(vgs)
	if len(members) != 2 {
		e.t.Fatalf("%d member VolumeSnapshots of the group, want 2: %v", len(members), members)
	}

	// Ceph: one group holding one complete group snapshot, no image a member any more
	groups := e.rbdGroups()
	if len(groups) != 1 || len(groups[0].snaps) != 1 || groups[0].images != 0 {
		e.t.Fatalf("RBD groups %+v: want one group with one group snapshot and no member images", groups)
	}

	// the same request name again, straight to the driver as csi-snapshotter sends it: the same
	// group snapshot
	var sources []string
	for _, pv := range pvs {
		sources = append(sources, pv.Spec.CSI.VolumeHandle)
	}
	again := e.createGroupSnapshot("groupsnapshot-"+string(vgs.UID), sources)
	if again.GetGroupSnapshotId() != *vgsc.Status.VolumeGroupSnapshotHandle || len(again.GetSnapshots()) != 2 {
		e.t.Errorf("CreateVolumeGroupSnapshot with the same name: %s, want %s", again.GetGroupSnapshotId(), *vgsc.Status.VolumeGroupSnapshotHandle)
	}
	for _, info := range vgsc.Status.VolumeSnapshotInfoList {
		if !slices.ContainsFunc(again.GetSnapshots(), func(s *csi.Snapshot) bool { return s.GetSnapshotId() == info.SnapshotHandle }) {
			e.t.Errorf("repeated create lacks member %s", info.SnapshotHandle)
		}
	}
	if n := len(e.rbdGroups()); n != 1 {
		e.t.Errorf("%d RBD groups after the repeated create, want 1", n)
	}

	// restores from the members: counters of one point in time
	got := map[string]int64{}
	var restored []*corev1.PersistentVolume
	for _, m := range members {
		src := *m.Spec.Source.PersistentVolumeClaimName
		pv := e.createPVC(claim{name: "from-" + src, class: "monoceph-rbd", size: "64Mi", mode: corev1.ReadWriteOnce, fromSnapshot: m.Name})
		restored = append(restored, pv)
		r := e.mountPV(pv, false)
		if got[src], err = readCounter(r.path("counter")); err != nil {
			e.t.Fatalf("counter of the volume restored from %s's member: %v", src, err)
		}
		r.unmount()
	}
	a, b := got["gs-a"], got["gs-b"]
	e.t.Logf("group snapshot while the writer ran (last counter %d): a=%d b=%d", last, a, b)
	if b < 1 || a > last || (a != b && a != b+1) {
		e.t.Errorf("restored counters a=%d b=%d (writer's last %d): not one point in time", a, b, last)
	}

	for _, pv := range restored {
		e.deletePVC(pv.Spec.ClaimRef.Name, pv)
	}
	images := map[string]string{}
	for name, pv := range pvs {
		images[name] = e.rbdImage(pv)
	}
	e.deleteGroupSnapshot(vgs, vgsc.Name, members)
	if groups := e.rbdGroups(); len(groups) != 0 {
		e.t.Errorf("RBD groups after the VolumeGroupSnapshot was deleted: %+v", groups)
	}
	for name, image := range images {
		out, err := e.cephCmd("rbd", "snap", "ls", "--all", "--format", "json", image)
		if err != nil || strings.TrimSpace(out) != "[]" {
			e.t.Errorf("snapshots of %s's image after the group snapshot was deleted: %s %v", name, out, err)
		}
	}
	if keys := e.journalKeys("gsnap."); len(keys) != 0 {
		e.t.Errorf("group snapshot journal entries left: %v", keys)
	}
	for name, m := range mounts {
		m.unmount()
		e.deletePVC(name, pvs[name])
	}
}

// groupMembers lists the VolumeSnapshots the snapshot controller made for a group snapshot's
// members (owned by it), waiting until both are ready.
func (e *env) groupMembers(vgs *groupv1.VolumeGroupSnapshot) []snapv1.VolumeSnapshot {
	e.t.Helper()
	var out []snapv1.VolumeSnapshot
	e.waitFor(60*time.Second, "member VolumeSnapshots ready", func() (bool, string) {
		list, err := e.snap.SnapshotV1().VolumeSnapshots(userNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		out = nil
		var seen []string
		for _, s := range list.Items {
			if !slices.ContainsFunc(s.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == vgs.UID }) {
				continue
			}
			ready := s.Status != nil && s.Status.ReadyToUse != nil && *s.Status.ReadyToUse
			seen = append(seen, fmt.Sprintf("%s ready=%v", s.Name, ready))
			if ready {
				out = append(out, s)
			}
		}
		return len(out) == 2, fmt.Sprint(seen)
	})
	return out
}

type rbdGroup struct {
	name   string
	snaps  []string
	images int
}

// rbdGroups lists the RBD groups of pool rbd with their group snapshots and member images.
func (e *env) rbdGroups() []rbdGroup {
	e.t.Helper()
	out, err := e.cephCmd("rbd", "group", "ls", "--format", "json", e.ceph.RBDPool)
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	if err := json.Unmarshal([]byte(out), &names); err != nil {
		e.t.Fatalf("rbd group ls: %v: %s", err, out)
	}
	var groups []rbdGroup
	for _, n := range names {
		g := rbdGroup{name: n}
		spec := e.ceph.RBDPool + "/" + n
		out, err := e.cephCmd("rbd", "group", "snap", "ls", "--format", "json", spec)
		if err != nil {
			e.t.Fatal(err)
		}
		var snaps []struct {
			Snapshot string `json:"snapshot"`
			State    string `json:"state"`
		}
		if err := json.Unmarshal([]byte(out), &snaps); err != nil {
			e.t.Fatalf("rbd group snap ls: %v: %s", err, out)
		}
		for _, s := range snaps {
			g.snaps = append(g.snaps, s.Snapshot+"("+s.State+")")
		}
		out, err = e.cephCmd("rbd", "group", "image", "ls", "--format", "json", spec)
		if err != nil {
			e.t.Fatal(err)
		}
		var imgs []json.RawMessage
		if err := json.Unmarshal([]byte(out), &imgs); err != nil {
			e.t.Fatalf("rbd group image ls: %v: %s", err, out)
		}
		g.images = len(imgs)
		if !strings.HasPrefix(n, rbdname.GroupPrefix) {
			e.t.Errorf("RBD group %s is not the driver's", n)
		}
		groups = append(groups, g)
	}
	return groups
}

// journalKeys lists the omap keys with prefix of the driver's journal objects in pool rbd.
func (e *env) journalKeys(prefix string) []string {
	e.t.Helper()
	out, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "ls")
	if err != nil {
		e.t.Fatal(err)
	}
	var keys []string
	for _, oid := range strings.Fields(out) {
		if !strings.HasPrefix(oid, "monoceph.journal.") {
			continue
		}
		vals, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "listomapkeys", oid)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range strings.Fields(vals) {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, oid+" "+k)
			}
		}
	}
	return keys
}

// createGroupSnapshot calls the RBD controller's GroupController over its socket, with the
// chart's Ceph user, as csi-snapshotter does.
func (e *env) createGroupSnapshot(name string, sources []string) *csi.VolumeGroupSnapshot {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := e.kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=rbd-controller"})
	if err != nil || len(pods.Items) != 1 {
		e.t.Fatalf("rbd controller pod: %v (%d pods)", err, len(pods.Items))
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(e.runner.root, "pods", pods.Items[0].Name, "volumes", "socket-dir", "csi.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	s, err := e.kc.CoreV1().Secrets(namespace).Get(ctx, release+"-ceph-user", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	secrets := map[string]string{}
	for k, v := range s.Data {
		secrets[k] = string(v)
	}
	resp, err := csi.NewGroupControllerClient(conn).CreateVolumeGroupSnapshot(ctx, &csi.CreateVolumeGroupSnapshotRequest{Name: name, SourceVolumeIds: sources, Secrets: secrets})
	if err != nil {
		e.t.Fatalf("CreateVolumeGroupSnapshot %s: %v", name, err)
	}
	return resp.GetGroupSnapshot()
}

// deleteGroupSnapshot deletes a VolumeGroupSnapshot and waits until its content and its
// members' VolumeSnapshots and contents are gone.
func (e *env) deleteGroupSnapshot(vgs *groupv1.VolumeGroupSnapshot, content string, members []snapv1.VolumeSnapshot) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.snap.GroupsnapshotV1().VolumeGroupSnapshots(userNS).Delete(ctx, vgs.Name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(90*time.Second, "VolumeGroupSnapshotContent "+content+" and the members deleted", func() (bool, string) {
		_, err := e.snap.GroupsnapshotV1().VolumeGroupSnapshotContents().Get(ctx, content, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("content: %v; %s", err, e.eventsOf(content))
		}
		for _, m := range members {
			if _, err := e.snap.SnapshotV1().VolumeSnapshots(userNS).Get(ctx, m.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("member %s: %v", m.Name, err)
			}
			if c := m.Status.BoundVolumeSnapshotContentName; c != nil {
				if _, err := e.snap.SnapshotV1().VolumeSnapshotContents().Get(ctx, *c, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					return false, fmt.Sprintf("member content %s: %v", *c, err)
				}
			}
		}
		return true, ""
	})
}
