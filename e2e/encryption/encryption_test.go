// Package encryption tests encrypted RBD volumes end to end through the driver's controller
// and node services: librbd's LUKS2 on the FUSE data path, what reaches the OSDs, the KMS
// providers, bad input, snapshots, restores and expansion.
package encryption

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/e2e/localdriver"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/driver"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/logtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	mib        = int64(1) << 20
	size       = 64 * mib
	passphrase = "correct horse battery staple"
	// kmsConfig has one usable entry and one monoceph refuses by name
	kmsConfig = `{"meta":{"encryptionKMSType":"metadata"},"vault":"{\"encryptionKMSType\":\"vaulttenantsa\",\"vaultAddress\":\"http://vault:8200\"}"}`
)

var mountCap = &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}

type rig struct {
	t    *testing.T
	ctx  context.Context
	d    *localdriver.Driver
	ctrl csi.ControllerClient
	node csi.NodeClient
	ns   string
	io   *rados.IOContext // the test's RADOS namespace
	vc   *csi.VolumeCapability
}

func newRig(t *testing.T) *rig {
	cl := cephtest.Env(t)
	if os.Geteuid() != 0 {
		t.Skip("staging needs root (FUSE, loop devices, mounts)")
	}
	cfgFile := filepath.Join(t.TempDir(), "kms.json")
	if err := os.WriteFile(cfgFile, []byte(kmsConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	d := localdriver.StartNamed(t, driver.TypeRBD, "", "", func(c *driver.Config) { c.KMSConfig = cfgFile })
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	conn, err := p.Get(ctx, cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	root, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Destroy)
	ns := fmt.Sprintf("enc%d", time.Now().UnixNano()%1e12)
	if err := rbd.NamespaceCreate(root, ns); err != nil {
		t.Fatal(err)
	}
	io, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	io.SetNamespace(ns)
	r := &rig{t: t, ctx: ctx, d: d, ctrl: csi.NewControllerClient(d.Conn), node: csi.NewNodeClient(d.Conn), ns: ns, io: io, vc: mountCap}
	t.Cleanup(func() {
		// every volume of a test is deleted by then: nothing may be left, journal included
		left := cephtest.Settled(func() []string {
			l, err := cephtest.RBDLeftovers(io)
			if err != nil {
				return []string{err.Error()}
			}
			return l
		})
		if len(left) > 0 {
			t.Errorf("left in namespace %s: %v", ns, left)
		}
		io.Destroy()
		if err := rbd.NamespaceRemove(root, ns); err != nil {
			t.Errorf("removing namespace %s: %v", ns, err)
		}
	})
	return r
}

func (r *rig) params(kv ...string) map[string]string {
	p := map[string]string{"clusterID": r.d.Cluster.ID, "pool": r.d.Cluster.RBDPool, "radosNamespace": r.ns}
	for i := 0; i+1 < len(kv); i += 2 {
		p[kv[i]] = kv[i+1]
	}
	return p
}

func (r *rig) secrets(pass string) map[string]string {
	s := r.d.Cluster.Secrets()
	if pass != "" {
		s[kms.PassphraseKey] = pass
	}
	return s
}

func (r *rig) create(name string, bytes int64, params map[string]string, src *csi.VolumeContentSource) (*csi.Volume, error) {
	resp, err := r.ctrl.CreateVolume(r.ctx, &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes},
		VolumeCapabilities: []*csi.VolumeCapability{r.vc}, Parameters: params, Secrets: r.secrets(passphrase), VolumeContentSource: src})
	return resp.GetVolume(), err
}

func (r *rig) mustCreate(name string, bytes int64, params map[string]string, src *csi.VolumeContentSource) *csi.Volume {
	r.t.Helper()
	v, err := r.create(name, bytes, params, src)
	if err != nil {
		r.t.Fatalf("CreateVolume %s: %v", name, err)
	}
	r.t.Cleanup(func() {
		if _, err := r.ctrl.DeleteVolume(context.Background(), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId(), Secrets: r.secrets("")}); err != nil {
			r.t.Errorf("DeleteVolume %s: %v", name, err)
		}
	})
	return v
}

// staged is a volume staged and published at paths of its own.
type staged struct {
	v                   *csi.Volume
	staging, target     string
	unstaged, published bool
}

func (r *rig) stage(v *csi.Volume, name, pass string) (*staged, error) {
	s := &staged{v: v, staging: filepath.Join(r.d.Dir, name+"-s"), target: filepath.Join(r.d.Dir, name+"-t")}
	if err := os.MkdirAll(s.staging, 0o750); err != nil {
		return nil, err
	}
	_, err := r.node.NodeStageVolume(r.ctx, &csi.NodeStageVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: s.staging,
		VolumeCapability: r.vc, VolumeContext: v.GetVolumeContext(), Secrets: r.secrets(pass)})
	if err != nil {
		return nil, err
	}
	_, err = r.node.NodePublishVolume(r.ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: s.staging,
		TargetPath: s.target, VolumeCapability: r.vc, VolumeContext: v.GetVolumeContext()})
	s.published = err == nil
	r.t.Cleanup(func() { r.unstage(s) })
	return s, err
}

func (r *rig) mustStage(v *csi.Volume, name string) *staged {
	r.t.Helper()
	s, err := r.stage(v, name, passphrase)
	if err != nil {
		r.t.Fatalf("staging %s: %v", name, err)
	}
	return s
}

func (r *rig) unstage(s *staged) {
	if s.unstaged {
		return
	}
	ctx := context.Background()
	if _, err := r.node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: s.v.GetVolumeId(), TargetPath: s.target}); err != nil {
		r.t.Errorf("unpublish: %v", err)
	}
	if _, err := r.node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: s.v.GetVolumeId(), StagingTargetPath: s.staging}); err != nil {
		r.t.Errorf("unstage: %v", err)
	}
	s.unstaged = true
}

// deviceSize is the size of the block device the staged volume's filesystem is on: what a
// pod's volume holds.
func (r *rig) deviceSize(s *staged) int64 {
	r.t.Helper()
	b, err := os.ReadFile(s.staging + ".monoceph.json")
	if err != nil {
		r.t.Fatal(err)
	}
	var rec struct {
		Attachment struct {
			Device string `json:"device"`
		} `json:"attachment"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.Attachment.Device == "" {
		r.t.Fatalf("staging record %s: %v", b, err)
	}
	f, err := os.Open(rec.Attachment.Device)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// pattern is 1 MiB of a marker no volume holds by chance.
func pattern(t *testing.T) []byte {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return bytes.Repeat([]byte("MONOCEPH-PLAINTEXT-"+hex.EncodeToString(b)+"|"), (1<<20)/36+1)[:1<<20]
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: read %d bytes that differ from the %d written", path, len(got), len(want))
	}
}

// imageOf is the image name of a volume.
func imageOf(v *csi.Volume) string { return v.GetVolumeContext()["imageName"] }

// inObjects reports whether any RADOS data object of the volume's image holds needle, read
// with librados straight from the OSDs (what anyone with access to the pool sees).
func (r *rig) inObjects(v *csi.Volume, needle []byte) bool {
	r.t.Helper()
	img, err := rbd.OpenImageReadOnly(r.io, imageOf(v), rbd.NoSnapshot)
	if err != nil {
		r.t.Fatal(err)
	}
	id, err := img.GetId()
	img.Close()
	if err != nil {
		r.t.Fatal(err)
	}
	objs, err := cephtest.ObjectsWithPrefix(r.io, "rbd_data."+id+".")
	if err != nil {
		r.t.Fatal(err)
	}
	if len(objs) == 0 {
		r.t.Fatalf("image %s has no data objects", imageOf(v))
	}
	buf := make([]byte, 4<<20)
	for _, o := range objs {
		n, err := r.io.Read(o, buf, 0)
		if err != nil {
			r.t.Fatalf("reading %s: %v", o, err)
		}
		if bytes.Contains(buf[:n], needle) {
			return true
		}
	}
	return false
}

// luksUUID reads the UUID of the image's LUKS2 header (binary header: magic at 0, uuid at 168,
// 40 bytes), raw, without the key.
func (r *rig) luksUUID(v *csi.Volume) []byte {
	r.t.Helper()
	img, err := rbd.OpenImageReadOnly(r.io, imageOf(v), rbd.NoSnapshot)
	if err != nil {
		r.t.Fatal(err)
	}
	defer img.Close()
	hdr := make([]byte, 208)
	if _, err := img.ReadAt(hdr, 0); err != nil {
		r.t.Fatal(err)
	}
	if !bytes.HasPrefix(hdr, []byte("LUKS\xba\xbe")) {
		r.t.Fatalf("image %s has no LUKS header: %q", imageOf(v), hdr[:6])
	}
	uuid := bytes.TrimRight(hdr[168:208], "\x00")
	if len(uuid) == 0 {
		r.t.Fatalf("image %s: empty LUKS UUID", imageOf(v))
	}
	return uuid
}

func (r *rig) rawSize(v *csi.Volume) int64 {
	r.t.Helper()
	img, err := rbd.OpenImageReadOnly(r.io, imageOf(v), rbd.NoSnapshot)
	if err != nil {
		r.t.Fatal(err)
	}
	defer img.Close()
	n, err := img.GetSize()
	if err != nil {
		r.t.Fatal(err)
	}
	return int64(n)
}

func wantCode(t *testing.T, err error, code codes.Code, texts ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("err = %v, want %v", err, code)
	}
	for _, s := range texts {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("err = %v, want it to say %q", err, s)
		}
	}
}

// TestEncryptedVolumes: for each provider, a pattern written through the pod's path is on the
// OSDs only as ciphertext (and as plaintext on an unencrypted control volume), reads back after
// unstage and restage, survives expansion, and restores from a snapshot; a wrong passphrase
// stages nothing.
func TestEncryptedVolumes(t *testing.T) {
	r := newRig(t)
	// every request and response at the highest verbosity: no key may be in them
	logs := logtest.Capture(t, 5)
	secrets := []string{passphrase, "wrong-7Hq2Zx9Lp4Vm"}
	t.Cleanup(func() {
		// and their base64 (a DEK or a secret printed as []byte in JSON); the unpadded form
		// is a prefix of the padded one
		all := append([]string(nil), secrets...)
		for _, k := range secrets {
			all = append(all, base64.RawStdEncoding.EncodeToString([]byte(k)), base64.RawURLEncoding.EncodeToString([]byte(k)))
		}
		if leaks := logtest.Leaks(logs.String(), all...); len(leaks) > 0 {
			t.Errorf("the logs hold key material: %q", leaks)
		}
	})
	start := time.Now()
	control := r.mustCreate("control", size, r.params("mounter", "fuse"), nil)
	t.Logf("CreateVolume, unencrypted: %v", time.Since(start).Round(time.Millisecond))
	for _, kmsID := range []string{"", "meta"} {
		name := "default"
		if kmsID != "" {
			name = kmsID
		}
		t.Run(name, func(t *testing.T) {
			r := *r
			r.t = t
			params := r.params("encrypted", "true")
			if kmsID != "" {
				params["encryptionKMSID"] = kmsID
			}
			start := time.Now()
			v := r.mustCreate("enc-"+name, size, params, nil)
			t.Logf("CreateVolume, encrypted (%s provider): %v", name, time.Since(start).Round(time.Millisecond))
			if v.GetCapacityBytes() != size {
				t.Fatalf("capacity %d, want %d", v.GetCapacityBytes(), size)
			}
			// a repeat (the CO's retry) finds the volume done and formats nothing again
			start = time.Now()
			again, err := r.create("enc-"+name, size, params, nil)
			if err != nil || again.GetVolumeId() != v.GetVolumeId() || again.GetCapacityBytes() != size {
				t.Fatalf("repeated CreateVolume: %v, %v", again, err)
			}
			t.Logf("repeated CreateVolume of the encrypted volume: %v", time.Since(start).Round(time.Millisecond))
			if raw := r.rawSize(v); raw <= size {
				t.Fatalf("image of %d bytes: no room for the LUKS header beside %d bytes of volume", raw, size)
			}
			if kmsID == "meta" {
				img, err := rbd.OpenImageReadOnly(r.io, imageOf(v), rbd.NoSnapshot)
				if err != nil {
					t.Fatal(err)
				}
				w, err := img.GetMetadata(kms.MetadataDEKKey)
				img.Close()
				if err != nil || !strings.Contains(w, `"nonce"`) || strings.Contains(w, passphrase) {
					t.Fatalf("metadata %s = %q, %v: want a wrapped DEK", kms.MetadataDEKKey, w, err)
				}
				dek, err := kms.Unwrap([]byte(passphrase), v.GetVolumeId(), w)
				if err != nil {
					t.Fatalf("the DEK is not wrapped for its volume: %v", err)
				}
				secrets = append(secrets, string(dek))
			}

			// a wrong passphrase: a clear error, nothing staged
			bad := filepath.Join(r.d.Dir, name+"-bad-s")
			_, err = r.stage(v, name+"-bad", "wrong-7Hq2Zx9Lp4Vm")
			wantCode(t, err, codes.InvalidArgument, "passphrase")
			if _, err := os.Stat(bad + ".monoceph.json"); !os.IsNotExist(err) {
				t.Fatalf("a failed stage left its record: %v", err)
			}
			if m, err := hostmount.MountAt(bad); err != nil || m != nil {
				t.Fatalf("a failed stage left a mount at %s: %+v, %v", bad, m, err)
			}

			start = time.Now()
			s := r.mustStage(v, name)
			t.Logf("NodeStageVolume + NodePublishVolume, encrypted (%s provider, mkfs included): %v", name, time.Since(start).Round(time.Millisecond))
			if got := r.deviceSize(s); got != size {
				t.Fatalf("the pod's device is %d bytes, want the %d asked for", got, size)
			}
			data := pattern(t)
			writeFile(t, filepath.Join(s.target, "f"), data)
			r.unstage(s)
			if r.inObjects(v, data[:64]) {
				t.Fatal("the plaintext written through the pod's path is in the encrypted volume's RADOS objects")
			}

			// a repeat after data was written formats nothing: the LUKS header (its UUID) is
			// the one the data was written under (the read-back below checks the data)
			uuid := r.luksUUID(v)
			if _, err := r.create("enc-"+name, size, params, nil); err != nil {
				t.Fatalf("repeated CreateVolume after data was written: %v", err)
			}
			if again := r.luksUUID(v); !bytes.Equal(again, uuid) {
				t.Fatalf("the LUKS header changed on a repeated CreateVolume: UUID %q, was %q", again, uuid)
			}

			// read back after a new stage (a new FUSE server loads the key again)
			s = r.mustStage(v, name+"-2")
			mustRead(t, filepath.Join(s.target, "f"), data)

			// snapshot and restore, larger than the source: the clone opens with its
			// source's key (Pacific) and the metadata provider's DEK is wrapped for it
			snap, err := r.ctrl.CreateSnapshot(r.ctx, &csi.CreateSnapshotRequest{Name: "snap-" + name, SourceVolumeId: v.GetVolumeId(), Secrets: r.secrets("")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := r.ctrl.DeleteSnapshot(context.Background(), &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId(), Secrets: r.secrets("")}); err != nil {
					t.Errorf("DeleteSnapshot: %v", err)
				}
			})
			if got := snap.GetSnapshot().GetSizeBytes(); got != size {
				t.Fatalf("snapshot size %d, want the volume's %d", got, size)
			}
			src := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}}
			_, err = r.create("restore-plain-"+name, size, r.params("mounter", "fuse"), src)
			wantCode(t, err, codes.InvalidArgument, "is encrypted")
			otherKMS := r.params("encrypted", "true", "encryptionKMSID", "meta")
			if kmsID == "meta" {
				otherKMS = r.params("encrypted", "true")
			}
			_, err = r.create("restore-otherkms-"+name, size, otherKMS, src)
			wantCode(t, err, codes.InvalidArgument, "the copy keeps its source's key")
			restored := r.mustCreate("restore-"+name, 2*size, params, src)
			rs := r.mustStage(restored, "restore-"+name)
			mustRead(t, filepath.Join(rs.target, "f"), data)
			if got := r.deviceSize(rs); got != 2*size {
				t.Fatalf("the restored volume's device is %d bytes, want %d", got, 2*size)
			}
			r.unstage(rs)

			// a clone of the volume itself (a transient snapshot, a clone) reads the same
			clone := r.mustCreate("clone-"+name, size, params, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
				Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v.GetVolumeId()}}})
			cs := r.mustStage(clone, "clone-"+name)
			mustRead(t, filepath.Join(cs.target, "f"), data)
			if got := r.deviceSize(cs); got != size {
				t.Fatalf("the clone's device is %d bytes, want %d", got, size)
			}
			r.unstage(cs)

			// expansion keeps the volume readable, and the pod sees the new size
			exp, err := r.ctrl.ControllerExpandVolume(r.ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(),
				CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * size}, Secrets: r.secrets(""), VolumeCapability: mountCap})
			if err != nil || exp.GetCapacityBytes() != 2*size {
				t.Fatalf("ControllerExpandVolume: %v, %v", exp, err)
			}
			if _, err := r.node.NodeExpandVolume(r.ctx, &csi.NodeExpandVolumeRequest{VolumeId: v.GetVolumeId(), VolumePath: s.target,
				StagingTargetPath: s.staging, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * size}, VolumeCapability: mountCap}); err != nil {
				// the device grows first; the kernel refuses online ext4 growth without
				// CAP_SYS_RESOURCE, which some sandboxes (this one) withhold from root
				if !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
					t.Fatalf("NodeExpandVolume: %v", err)
				}
				t.Logf("the filesystem did not grow (no CAP_SYS_RESOURCE here); the device did: %v", err)
			}
			if got := r.deviceSize(s); got != 2*size {
				t.Fatalf("the expanded volume's device is %d bytes, want %d", got, 2*size)
			}
			mustRead(t, filepath.Join(s.target, "f"), data)
			r.unstage(s)
		})
	}
	t.Run("control", func(t *testing.T) {
		r := *r
		r.t = t
		start := time.Now()
		s := r.mustStage(control, "control")
		t.Logf("NodeStageVolume + NodePublishVolume, unencrypted (mkfs included): %v", time.Since(start).Round(time.Millisecond))
		data := pattern(t)
		writeFile(t, filepath.Join(s.target, "f"), data)
		r.unstage(s)
		if !r.inObjects(control, data[:64]) {
			t.Fatal("the plaintext written to the unencrypted control volume is not in its RADOS objects: the search proves nothing")
		}
	})
}

// TestEncryptedBlock: a raw block volume is plaintext to its pod and ciphertext on the OSDs,
// and what was written reads back after a new stage; the device is the size asked for.
func TestEncryptedBlock(t *testing.T) {
	r := newRig(t)
	r.vc = &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
	v := r.mustCreate("enc-block", size, r.params("encrypted", "true"), nil)
	s := r.mustStage(v, "block")
	data := pattern(t)
	f, err := os.OpenFile(s.target, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.Seek(0, io.SeekEnd); err != nil || n != size {
		t.Fatalf("the pod's block device is %d bytes (%v), want %d", n, err, size)
	}
	if _, err := f.WriteAt(data, 8<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r.unstage(s)
	if r.inObjects(v, data[:64]) {
		t.Fatal("the plaintext written to the block device is in the encrypted volume's RADOS objects")
	}
	s = r.mustStage(v, "block-2")
	f, err = os.Open(s.target)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	_, err = f.ReadAt(got, 8<<20)
	f.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading back the block device after a new stage: %v (differs: %v)", err, !bytes.Equal(got, data))
	}
	r.unstage(s)
}
