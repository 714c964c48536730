package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/rbd/attachment"
	"github.com/monoceph/monoceph/internal/volid"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appPod creates a pod of the user's on node n using the claim: what a StatefulSet would make.
// Its container never runs; the test plays the kubelet for its volume (attach, stage, use).
func (e *env) appPod(name string, n *node, claim string) *corev1.Pod {
	e.t.Helper()
	pod, err := e.kc.CoreV1().Pods(userNS).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return pod
}

// attachment is the VolumeAttachment of pv to node n, or nil.
func (e *env) attachment(pv *corev1.PersistentVolume, n *node) *storagev1.VolumeAttachment {
	e.t.Helper()
	list, err := e.kc.StorageV1().VolumeAttachments().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i, va := range list.Items {
		if va.Spec.NodeName == n.name && va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv.Name {
			return &list.Items[i]
		}
	}
	return nil
}

// waitAttached waits until the attach/detach controller and the external-attacher attached pv
// to n (ControllerPublishVolume succeeded), as the kubelet does before staging, and returns
// the publish context.
func (e *env) waitAttached(pv *corev1.PersistentVolume, n *node, timeout time.Duration) map[string]string {
	e.t.Helper()
	var va *storagev1.VolumeAttachment
	e.waitFor(timeout, "PV "+pv.Name+" attached to "+n.name, func() (bool, string) {
		va = e.attachment(pv, n)
		if va == nil {
			return false, "no VolumeAttachment; " + e.eventsOf(pv.Name)
		}
		msg := ""
		if va.Status.AttachError != nil {
			msg = va.Status.AttachError.Message
		}
		return va.Status.Attached, fmt.Sprintf("VolumeAttachment %s attached=%v %s", va.Name, va.Status.Attached, msg)
	})
	return va.Status.AttachmentMetadata
}

// kubeletMount is the kubelet's part of starting pod on n: wait for the attachment, stage and
// publish the volume, and report it in use in the node's status.
func (e *env) kubeletMount(pod *corev1.Pod, n *node, pv *corev1.PersistentVolume, timeout time.Duration) *mounted {
	e.t.Helper()
	pc := e.waitAttached(pv, n, timeout)
	m, err := e.mountOn(n, pv, false, pc)
	if err != nil {
		e.t.Fatal(err)
	}
	e.setVolumesInUse(n, csiVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle), true)
	return m
}

// kubeletStop is the kubelet's part of deleting pod: unpublish and unstage its volume, report it
// no longer in use, remove the pod; then the attachment goes (ControllerUnpublishVolume).
func (e *env) kubeletStop(pod *corev1.Pod, n *node, m *mounted) {
	e.t.Helper()
	m.unmount()
	pv := m.pv
	e.setVolumesInUse(n, csiVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle), false)
	zero := int64(0)
	if err := e.kc.CoreV1().Pods(userNS).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	e.waitFor(2*time.Minute, "PV "+pv.Name+" detached from "+n.name, func() (bool, string) {
		va := e.attachment(pv, n)
		if va == nil {
			return true, ""
		}
		msg := ""
		if va.Status.DetachError != nil {
			msg = va.Status.DetachError.Message
		}
		return false, "VolumeAttachment " + va.Name + " " + msg
	})
}

// stepPreUpgradeAttach: a PV like those chart 0.1.0 provisioned names no controller-publish
// secret, and its spec.csi cannot gain one; a pod using it is attached all the same
// (ControllerPublishVolume with the controller's own Secret) and reads what was written.
func (e *env) stepPreUpgradeAttach() {
	a := e.nodes[nodeA]
	pod := e.appPod("old-volume-reader", a, "pre-upgrade")
	m := e.kubeletMount(pod, a, preUpgrade, 2*time.Minute)
	if got := m.read("data"); got != preUpgradeData {
		e.t.Errorf("the pre-upgrade volume reads %q", got)
	}
	e.kubeletStop(pod, a, m)
	e.deletePVC("pre-upgrade", preUpgrade)
	if err := e.kc.StorageV1().StorageClasses().Delete(context.Background(), "monoceph-rbd-0-1-0", metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// controllerClient connects to the RBD controller's CSI socket.
func (e *env) controllerClient(component string) csi.ControllerClient {
	e.t.Helper()
	list, err := e.kc.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && e.runner.started(p.Name) {
			conn, err := grpc.NewClient("unix://"+filepath.Join(e.runner.root, "pods", p.Name, "volumes", "socket-dir", "csi.sock"),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				e.t.Fatal(err)
			}
			e.t.Cleanup(func() { conn.Close() })
			return csi.NewControllerClient(conn)
		}
	}
	e.t.Fatalf("no running %s pod", component)
	return nil
}

// secretOf reads a Secret as CSI secrets.
func (e *env) secretOf(ref *corev1.SecretReference) map[string]string {
	e.t.Helper()
	s, err := e.kc.CoreV1().Secrets(ref.Namespace).Get(context.Background(), ref.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out
}

// attachmentKeys lists the omap keys of an RBD volume's attachment object (of a volume of
// monoceph's or of one ceph-csi created; "" when there is none).
func (e *env) attachmentKeys(pv *corev1.PersistentVolume) string {
	e.t.Helper()
	key, ok := attachment.Key(pv.Spec.CSI.VolumeHandle)
	if !ok {
		e.t.Fatalf("PV %s: volume handle %s has no attachment object", pv.Name, pv.Spec.CSI.VolumeHandle)
	}
	oid := attachment.ObjectName(key)
	ns := pv.Spec.CSI.VolumeAttributes["radosNamespace"] // both drivers' volume contexts name it
	if _, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "--namespace", ns, "stat", oid); err != nil {
		return ""
	}
	out, err := e.cephCmd("rados", "-p", e.ceph.RBDPool, "--namespace", ns, "listomapkeys", oid)
	if err != nil {
		e.t.Fatal(err)
	}
	return strings.Join(strings.Fields(out), ",")
}

// writer writes and syncs to a file until it fails or stop closes; it reports the first error
// and when it came.
type writer struct {
	stop chan struct{}
	done chan struct{}
	err  error
	at   time.Time
}

func startWriter(path string) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
		if err == nil {
			defer f.Close()
		}
		buf := bytes.Repeat([]byte("w"), 4096)
		for i := int64(0); err == nil; i++ {
			if _, err = f.WriteAt(buf, (i%256)*4096); err == nil {
				err = f.Sync()
			}
			if err != nil {
				break
			}
			select {
			case <-w.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		w.err, w.at = err, time.Now()
	}()
	return w
}

// stepTwoNodes: a ReadWriteOnce RBD volume is never written from two nodes, and a lost node is
// fenced automatically. Node A runs a writer on an RBD volume and holds a CephFS file open;
// a pod on node B that wants the RBD volume waits (Multi-Attach), a publish to B or a stage on
// B straight through the driver are refused. Node A is then lost (its kubelet and its
// CephFS client freeze) and an administrator taints it out-of-service: the drivers fence its
// address, its writer fails at once, the CephFS file it held is written by B without waiting
// for A's session to time out, the RBD volume moves to B with everything A wrote and synced,
// and removing the taint lifts the fence.
func (e *env) stepTwoNodes() {
	ctx := context.Background()
	a, b := e.nodes[nodeA], e.nodes[nodeB]
	pv := e.createPVC(claim{name: "rwo", class: "monoceph-rbd", size: "64Mi", mode: corev1.ReadWriteOnce})
	if pv.Spec.CSI.ControllerPublishSecretRef == nil {
		e.t.Fatal("a PV of this chart names no controller-publish secret")
	}
	writerPod := e.appPod("writer-a", a, "rwo")
	mA := e.kubeletMount(writerPod, a, pv, 2*time.Minute)
	payload := make([]byte, 1<<20)
	if _, err := rand.Read(payload); err != nil {
		e.t.Fatal(err)
	}
	mA.write("before-taint", payload)
	// node A's RBD mount holder serves the image as a file over FUSE (the loop device's
	// backing); the kernel's end of that connection is found by the mount's device number
	fuseDirs, _ := filepath.Glob(a.host(filepath.Join(stateDir, rbdDriver, "*", "fuse")))
	if len(fuseDirs) != 1 {
		e.t.Fatalf("FUSE directories of node A's RBD volumes: %v", fuseDirs)
	}
	fuseConn := fuseConnection(e, fuseDirs[0])
	w := startWriter(mA.path("during"))
	defer close(w.stop)

	// node B: the attach/detach controller refuses, and so does the driver, both ways
	readerPod := e.appPod("reader-b", b, "rwo")
	e.waitFor(time.Minute, "a Multi-Attach event for reader-b", func() (bool, string) {
		ev := e.eventsOf("reader-b")
		return strings.Contains(ev, "Multi-Attach error"), ev
	})
	if va := e.attachment(pv, b); va != nil {
		e.t.Fatalf("a VolumeAttachment to node B exists while node A has the volume: %s", va.Name)
	}
	keys := e.attachmentKeys(pv)
	ctrl := e.controllerClient("rbd-controller")
	secrets := e.secretOf(pv.Spec.CSI.ControllerPublishSecretRef)
	snw := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}
	_, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle, NodeId: b.name,
		VolumeCapability: snw, Secrets: secrets})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), a.name) {
		e.t.Fatalf("ControllerPublishVolume to node B: %v; want FAILED_PRECONDITION naming %s", err, a.name)
	}
	missing := strings.Replace(pv.Spec.CSI.VolumeHandle, volIDUID(e, pv), "aaaaaaaaaaaaaaaa", 1)
	if _, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: missing, NodeId: b.name,
		VolumeCapability: snw, Secrets: secrets}); status.Code(err) != codes.NotFound {
		e.t.Fatalf("ControllerPublishVolume of a missing volume: %v; want NOT_FOUND", err)
	}
	if after := e.attachmentKeys(pv); after != keys {
		e.t.Fatalf("refused publishes changed the attachment object: %s, then %s", keys, after)
	}
	e.t.Logf("attachment object of %s: %s", pv.Name, keys)
	if _, err := e.mountOn(b, pv, false, nil); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), a.ip) {
		e.t.Fatalf("NodeStageVolume on node B while node A writes: %v; want FAILED_PRECONDITION naming %s", err, a.ip)
	} else {
		e.t.Logf("NodeStageVolume on node B: %v", status.Convert(err).Message())
	}

	// CephFS: node A holds a file open that it wrote to (its client holds the write
	// capability), then freezes; B's write to that file waits for A
	fsPV := e.createPVC(claim{name: "shared", class: "monoceph-cephfs", size: "64Mi", mode: corev1.ReadWriteMany})
	fsA, err := e.mountOn(a, fsPV, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	fsB, err := e.mountOn(b, fsPV, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	// a Ceph client that is not node A's announces node A in its CephFS session, and node A's
	// record of the RBD volume's clients is made to name node B's address and the intruder's
	// besides its own (as a root user of node A can): fencing A must cut off A alone (issue 26)
	aSession := e.nodeSession(a)
	in := e.startIntruder(aSession)
	e.plantAddrs(pv, a, a.ip, b.ip, intruderIP)
	e.t.Logf("node A's CephFS session %d (hostname %q); the intruder's %d announces the same", aSession.ID, aSession.meta("hostname"), in.session)
	// the shared cluster's blocklist may hold entries of these addresses from earlier tests
	out, err := e.cephCmd("ceph", "osd", "blocklist", "ls")
	if err != nil {
		e.t.Fatal(err)
	}
	blocklistBefore := map[string][]string{b.ip: blocklistOf(out, b.ip), intruderIP: blocklistOf(out, intruderIP)}

	held, err := os.OpenFile(fsA.path("held"), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := held.Write(bytes.Repeat([]byte("a"), 4096)); err != nil {
		e.t.Fatal(err)
	}
	// synced: dirty pages of a FUSE mount whose daemon is stopped can stall memory reclaim of
	// the whole machine; the open file keeps A's write capability, which is what B waits for
	if err := held.Sync(); err != nil {
		e.t.Fatal(err)
	}
	fusePIDs := e.daemonsOn(a, "ceph-fuse", fsA.staging)
	if len(fusePIDs) != 1 {
		e.t.Fatalf("ceph-fuse of node A: %v", fusePIDs)
	}
	freeze(e, fusePIDs[0])
	bWrote := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fsB.path("held"), os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteAt([]byte("b"), 0)
			if err == nil {
				err = f.Sync()
			}
			f.Close()
		}
		bWrote <- err
	}()
	select {
	case err := <-bWrote:
		e.t.Fatalf("node B wrote the file node A holds while A is frozen (%v): the test shows nothing", err)
	case <-time.After(5 * time.Second):
	}

	// node A is lost; an administrator takes it out of service
	a.setLost(true)
	tainted := time.Now()
	e.setTaint(a.name, true)
	e.waitFor(time.Minute, "node A's writer cut off", func() (bool, string) {
		select {
		case <-w.done:
			return true, ""
		default:
			return false, "still writing"
		}
	})
	e.t.Logf("node A's writer failed %.1f s after the taint: %v", w.at.Sub(tainted).Seconds(), w.err)
	if !errors.Is(w.err, syscall.EIO) {
		e.t.Errorf("node A's writer failed with %v; want EIO (the loop device's answer to librbd's ESHUTDOWN in the mount holder)", w.err)
	}
	// Node A is now shut off from Ceph; here it also dies, and with it the kernel's end of its
	// image file's FUSE connection. On this one machine a connection left up would keep the
	// kernel's writes to its cut-off server pending, and pages stuck in writeback stall memory
	// reclaim for every process; on a real lost node that stays there. (Killing the holder
	// would not do: node A's plugin keeps the connection open for the next holder.)
	if err := os.WriteFile(fuseConn, []byte("1"), 0); err != nil {
		e.t.Fatal(err)
	}
	// and so does its CephFS client, frozen until now: left stopped, it stalled unrelated
	// processes of this machine in uninterruptible sleep (a fork of this test process hung 18
	// minutes). A's session is already evicted by the fence, so B's write below still shows
	// the fence, not the session timeout (60 s), let it through.
	if err := syscall.Kill(fusePIDs[0], syscall.SIGKILL); err != nil {
		e.t.Fatal(err)
	}
	// any Ceph client from node A's address is shut out
	if out, err := e.cephCmdAt(a, "rados", "-p", e.ceph.RBDPool, "stat", "monoceph.no-such-object"); err == nil || !strings.Contains(err.Error(), "(108)") {
		e.t.Errorf("a Ceph client on node A after the fence: %v %s; want ESHUTDOWN (108)", err, out)
	}
	select {
	case err := <-bWrote:
		if err != nil {
			e.t.Fatalf("node B's write to the file node A held: %v", err)
		}
		e.t.Logf("node B wrote the file node A held %.1f s after the taint (%.1f s after it began)", time.Since(tainted).Seconds(), time.Since(tainted.Add(-5*time.Second)).Seconds())
	case <-time.After(60 * time.Second):
		e.t.Fatal("node B's write to the file node A held still waits 60 s after the taint")
	}
	if d := time.Since(tainted); d > 25*time.Second {
		e.t.Errorf("node B's CephFS write took %v after the taint: it waited for the session timeout, not for the fence", d)
	}

	e.checkOnlyNodeFenced(a, b, aSession, in, blocklistBefore)

	// the RBD volume moves to node B, with what A wrote and synced
	mB := e.kubeletMount(readerPod, b, pv, 3*time.Minute)
	e.t.Logf("the RBD volume was attached and staged on node B %.1f s after the taint", time.Since(tainted).Seconds())
	if got := mB.readBytes("before-taint"); sha256.Sum256(got) != sha256.Sum256(payload) {
		e.t.Fatal("what node A wrote and synced before the taint reads differently on node B")
	}
	if e.eventsOfReason(a.name, "Fenced") == 0 {
		e.t.Error("no Fenced event on node A")
	}

	// node A is repaired: the taint goes, the fence is lifted, its kubelet cleans up
	e.setTaint(a.name, false)
	e.waitFor(time.Minute, "node A unfenced", func() (bool, string) {
		out, err := e.cephCmdWithin(15*time.Second, nil, "ceph", "osd", "blocklist", "ls")
		if err != nil {
			return false, err.Error()
		}
		return !listsEntry(out, a.ip+":0/32"), out
	})
	if e.eventsOfReason(a.name, "Unfenced") == 0 {
		e.t.Error("no Unfenced event on node A")
	}
	thaw(fusePIDs[0])
	held.Close()
	a.setLost(false)
	mA.unmount()
	fsA.unmount()
	e.setVolumesInUse(a, csiVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle), false)
	fsB.unmount()
	e.kubeletStop(readerPod, b, mB)
	// node A's kubelet, back, removes its pod (its volume already unmounted above); until the
	// pod object goes, PVC protection keeps the claim, and with it the PV
	zero := int64(0)
	if err := e.kc.CoreV1().Pods(userNS).Delete(ctx, writerPod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	e.deletePVC("rwo", pv)
	e.deletePVC("shared", fsPV)
}

func volIDUID(e *env, pv *corev1.PersistentVolume) string {
	id, err := volid.ParseRBDVolume(pv.Spec.CSI.VolumeHandle)
	if err != nil {
		e.t.Fatal(err)
	}
	return id.UID
}

// fuseConnection is the abort file of the FUSE connection mounted at dir
// (/sys/fs/fuse/connections/<minor>/abort, fusectl): writing to it ends the connection as the
// end of its last process would.
func fuseConnection(e *env, dir string) string {
	e.t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		e.t.Fatal(err)
	}
	mountFusectl(e)
	abort := fmt.Sprintf("%s/%d/abort", fusectlDir, unix.Minor(st.Dev))
	if _, err := os.Stat(abort); err != nil {
		e.t.Fatalf("FUSE connection of %s: %v", dir, err)
	}
	return abort
}

const fusectlDir = "/sys/fs/fuse/connections"

// mountFusectl mounts the FUSE control filesystem where nothing has: a fresh machine has the
// directory but nothing mounted on it, and then no connection can be found there.
func mountFusectl(e *env) {
	e.t.Helper()
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == fusectlDir && slices.Contains(f, "fusectl") {
			return
		}
	}
	if err := unix.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err != nil {
		e.t.Fatalf("the FUSE control filesystem is not mounted on %s and mounting it failed: %v (as root: mount -t fusectl none %s)", fusectlDir, err, fusectlDir)
	}
	e.t.Logf("mounted the FUSE control filesystem on %s (a fresh machine has none)", fusectlDir)
}

// checkOnlyNodeFenced: after node lost's fence, only its own clients are cut off. The CephFS
// fencer found and evicted its session itself (not only the RBD fencer's blocklist of the same
// address); the intruder announcing lost's node ID and hostname keeps its session and writes;
// node other's and the intruder's addresses planted in lost's record are not blocklisted, and
// the Node says it refused them.
func (e *env) checkOnlyNodeFenced(lost, other *node, lostSession mdsSession, in *intruder, blocklistBefore map[string][]string) {
	e.t.Helper()
	if s := e.sessionByID(lostSession.ID); s.ID != 0 {
		e.t.Errorf("node A's CephFS session %d is still listed after the fence: %+v", lostSession.ID, s)
	}
	// the CephFS fencer found node A's session itself: it fences only the addresses of the
	// sessions it attributes to the node, and says so in its own event. (Its eviction of the
	// session may find it gone: the MDS drops the sessions of a client the RBD fencer's
	// blocklist of the same address cuts off, once the new OSD map reaches it.)
	fenced := fmt.Sprintf("%s: blocklisted the node's Ceph clients [%s/32]", fsDriver, lost.ip)
	e.waitFor(30*time.Second, "the CephFS fencer's Fenced event on node A", func() (bool, string) {
		msgs := e.eventMessages(lost.name, "Fenced")
		return slices.ContainsFunc(msgs, func(m string) bool { return strings.HasPrefix(m, fenced) }), fmt.Sprint(msgs)
	})
	client := regexp.MustCompile(fmt.Sprintf(`\bclient\W+%d\b`, lostSession.ID))
	for _, line := range strings.Split(e.runner.logOf(release+"-cephfs-controller-", "/monoceph"), "\n") {
		if strings.Contains(line, "Evicted MDS session of the fenced node") && client.MatchString(line) {
			e.t.Logf("the CephFS fencer evicted node A's session: %s", line)
		}
	}
	if e.sessionByID(in.session).ID == 0 {
		e.t.Errorf("the intruder's CephFS session %d was evicted with node A's", in.session)
	}
	in.write(e, "after-taint")
	out, err := e.cephCmd("ceph", "osd", "blocklist", "ls")
	if err != nil {
		e.t.Fatal(err)
	}
	for ip, before := range blocklistBefore {
		if now := blocklistOf(out, ip); !slices.Equal(now, before) {
			e.t.Errorf("fencing node A changed the blocklist entries of %s, which is not node A's: %v, before %v", ip, now, before)
		}
	}
	e.waitFor(30*time.Second, "a FenceAddressRefused event on node A naming node B's and the intruder's addresses", func() (bool, string) {
		msgs := strings.Join(e.eventMessages(lost.name, "FenceAddressRefused"), "\n")
		return strings.Contains(msgs, other.ip+" (") && strings.Contains(msgs, intruderIP+" ("), msgs
	})
	e.t.Logf("node A's events: Fenced %q; FenceAddressRefused %q", e.eventMessages(lost.name, "Fenced"), e.eventMessages(lost.name, "FenceAddressRefused"))
}

// freeze stops a process until the test ends (or thaw).
func freeze(e *env, pid int) {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { thaw(pid) })
}

func thaw(pid int) { _ = syscall.Kill(pid, syscall.SIGCONT) }

// setTaint adds or removes the out-of-service taint on a node, as an administrator does.
func (e *env) setTaint(name string, on bool) {
	e.t.Helper()
	ctx := context.Background()
	for range 10 {
		n, err := e.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
		if on {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		}
		_, err = e.kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			e.t.Fatal(err)
		}
	}
	e.t.Fatalf("tainting node %s: too many conflicts", name)
}

// eventsOfReason counts the events about an object with a reason.
func (e *env) eventsOfReason(name, reason string) int { return len(e.eventsList(name, reason)) }

// eventsList are the events of reason on the objects called name.
func (e *env) eventsList(name, reason string) []corev1.Event {
	e.t.Helper()
	list, err := e.kc.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

// cephCmdAt runs a Ceph command as a client on node n (from its address).
func (e *env) cephCmdAt(n *node, args ...string) (string, error) {
	var env []string
	for k, v := range n.env {
		env = append(env, k+"="+v)
	}
	return e.cephCmdEnv(env, args...)
}

func (m *mounted) readBytes(name string) []byte {
	m.e.t.Helper()
	b, err := os.ReadFile(m.path(name))
	if err != nil {
		m.e.t.Fatal(err)
	}
	return b
}
