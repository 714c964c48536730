package kube

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// mounted is a volume staged and published the way the kubelet does it. Its paths are the
// node's, as the kubelet passes them; path gives the test's way to a file in it.
type mounted struct {
	e       *env
	on      *node
	node    csi.NodeClient
	pv      *corev1.PersistentVolume
	staging string
	target  string // what the pod sees
}

// path is where the test finds a file of the volume: below the node's root, where the node
// plugin's mounts propagate.
func (m *mounted) path(name string) string { return m.on.host(filepath.Join(m.target, name)) }

// mountPV plays node A's kubelet for one pod using pv (see mountOn).
func (e *env) mountPV(pv *corev1.PersistentVolume, readOnly bool) *mounted {
	e.t.Helper()
	m, err := e.mountOn(e.nodes[nodeA], pv, readOnly, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// nodeClient connects to a node plugin's socket on node n.
func (e *env) nodeClient(n *node, driver string) csi.NodeClient {
	e.t.Helper()
	conn, err := grpc.NewClient("unix://"+n.host(filepath.Join(kubeletDir, "plugins", driver, "csi.sock")),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return csi.NewNodeClient(conn)
}

// mountOn plays node n's kubelet for one pod using pv: NodeStageVolume at the kubelet's global
// mount path with the node-stage secret the PV names and the publish context of its
// attachment, then NodePublishVolume at a pod's volume path, over the node plugin's socket.
// A failed stage is returned (with nothing left to clean up); other failures end the test.
func (e *env) mountOn(n *node, pv *corev1.PersistentVolume, readOnly bool, publishContext map[string]string) (*mounted, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := pv.Spec.CSI
	m := &mounted{e: e, on: n, node: e.nodeClient(n, src.Driver), pv: pv,
		staging: filepath.Join(kubeletDir, "plugins/kubernetes.io/csi", src.Driver, fmt.Sprintf("%x", sha256.Sum256([]byte(src.VolumeHandle))), "globalmount"),
		target:  filepath.Join(kubeletDir, "pods", "pod-"+pv.Name, "volumes/kubernetes.io~csi", pv.Name, "mount"),
	}
	for _, d := range []string{m.staging, filepath.Dir(m.target)} {
		if err := os.MkdirAll(n.host(d), 0o750); err != nil {
			e.t.Fatal(err)
		}
	}
	secrets := map[string]string{}
	// the chart points node staging at the node user, which cannot create, delete or fence
	// (PVs of ceph-csi's classes name ceph-csi's Secrets)
	if ref := src.NodeStageSecretRef; (src.Driver == rbdDriver || src.Driver == fsDriver) && (ref == nil || ref.Name != release+"-ceph-node-user") {
		e.t.Fatalf("PV %s node-stage secret %v, want the node user's", pv.Name, ref)
	}
	if ref := src.NodeStageSecretRef; ref != nil {
		s, err := e.kc.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatalf("node-stage secret: %v", err)
		}
		for k, v := range s.Data {
			secrets[k] = string(v)
		}
	}
	mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	if len(pv.Spec.AccessModes) > 0 {
		mode = map[corev1.PersistentVolumeAccessMode]csi.VolumeCapability_AccessMode_Mode{
			corev1.ReadWriteOnce: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
			corev1.ReadOnlyMany:  csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
			corev1.ReadWriteMany: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
		}[pv.Spec.AccessModes[0]]
	}
	vc := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: src.FSType, MountFlags: pv.Spec.MountOptions}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		// the kubelet's paths for raw block: the pod sees a device file, not a directory
		vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
		m.target = filepath.Join(kubeletDir, "pods", "pod-"+pv.Name, "volumeDevices/kubernetes.io~csi", pv.Name)
		if err := os.MkdirAll(n.host(filepath.Dir(m.target)), 0o750); err != nil {
			e.t.Fatal(err)
		}
	}
	if _, err := m.node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: src.VolumeHandle, StagingTargetPath: m.staging,
		VolumeCapability: vc, Secrets: secrets, VolumeContext: src.VolumeAttributes, PublishContext: publishContext}); err != nil {
		return nil, fmt.Errorf("NodeStageVolume %s on %s: %w", pv.Name, n.name, err)
	}
	e.t.Cleanup(m.unmount)
	if _, err := m.node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: src.VolumeHandle, StagingTargetPath: m.staging,
		TargetPath: m.target, VolumeCapability: vc, Readonly: readOnly, VolumeContext: src.VolumeAttributes, PublishContext: publishContext}); err != nil {
		e.t.Fatalf("NodePublishVolume %s on %s: %v", pv.Name, n.name, err)
	}
	return m, nil
}

// unmount unpublishes and unstages; both are idempotent, so calling it twice is fine.
func (m *mounted) unmount() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := m.pv.Spec.CSI.VolumeHandle
	if _, err := m.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: m.target}); err != nil {
		m.e.t.Errorf("NodeUnpublishVolume %s: %v", m.pv.Name, err)
	}
	if _, err := m.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: m.staging}); err != nil {
		m.e.t.Errorf("NodeUnstageVolume %s: %v", m.pv.Name, err)
	}
}

// write writes a file in the volume and makes it durable, so a snapshot taken next has it.
func (m *mounted) write(name string, data []byte) {
	m.e.t.Helper()
	f, err := os.Create(m.path(name))
	if err != nil {
		m.e.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		m.e.t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		m.e.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		m.e.t.Fatal(err)
	}
	// the filesystem's own metadata too (ext4 on a loop device over the fuse mounter's image file)
	if err := syncfs(m.path("")); err != nil {
		m.e.t.Fatal(err)
	}
}

// readAt reads n bytes at off of a block volume's device.
func (m *mounted) readAt(off int64, n int) []byte {
	m.e.t.Helper()
	f, err := os.Open(m.on.host(m.target))
	if err != nil {
		m.e.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		m.e.t.Fatal(err)
	}
	return b
}

func (m *mounted) read(name string) string {
	m.e.t.Helper()
	b, err := os.ReadFile(m.path(name))
	if err != nil {
		m.e.t.Fatal(err)
	}
	return string(b)
}

func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
