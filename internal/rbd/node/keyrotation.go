package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	ekrpb "github.com/csi-addons/spec/lib/go/encryptionkeyrotation"
	identitypb "github.com/csi-addons/spec/lib/go/identity"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/faultpoint"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/linger"
	"github.com/monoceph/monoceph/internal/luks"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// KeyRotation is the csi-addons EncryptionKeyRotationController service of an RBD node (what
// an EncryptionKeyRotationJob or CronJob calls, on a node the volume is attached to): it
// replaces the DEK of a volume monoceph encrypted with librbd by a new random one (see
// kms.Rotate), editing the key slots of the image's LUKS2 header; the data is not
// re-encrypted. The volume may be staged and in use meanwhile: the FUSE server's librbd handle
// keeps the volume key in memory and never reads the header again, and the header is written
// through a handle of its own, which takes librbd's exclusive lock for each write (the
// server's writes wait for it to come back).
type KeyRotation struct {
	ekrpb.UnimplementedEncryptionKeyRotationControllerServer
	s *Server
}

// KeyRotation returns the csi-addons EncryptionKeyRotationController service of s.
func (s *Server) KeyRotation() *KeyRotation { return &KeyRotation{s: s} }

// Register adds the service to a gRPC server.
func (k *KeyRotation) Register(g grpc.ServiceRegistrar) {
	ekrpb.RegisterEncryptionKeyRotationControllerServer(g, k)
}

// Capabilities are the service's.
func (*KeyRotation) Capabilities() []*identitypb.Capability {
	return []*identitypb.Capability{{Type: &identitypb.Capability_EncryptionKeyRotation_{EncryptionKeyRotation: &identitypb.Capability_EncryptionKeyRotation{
		Type: identitypb.Capability_EncryptionKeyRotation_ENCRYPTIONKEYROTATION}}}}
}

// EncryptionKeyRotate rotates the DEK of a volume. The csi-addons sidecar sends the volume
// ID, the PersistentVolume's volume attributes as parameters (the volume context: where the
// image is) and its node-stage secrets (the Ceph user, and the passphrase or Vault token of
// the volume's KMS); without parameters the volume's staging record on this node says where
// the image is. Which KMS keeps the DEK is the image's own record (kms.StateKey), which must
// name this volume ID. A volume without a DEK of its own (unencrypted, ceph-csi's dm-crypt,
// the default provider's class passphrase) is FAILED_PRECONDITION saying why.
func (k *KeyRotation) EncryptionKeyRotate(ctx context.Context, req *ekrpb.EncryptionKeyRotateRequest) (*ekrpb.EncryptionKeyRotateResponse, error) {
	s := k.s
	volumeID := req.GetVolumeId()
	if volumeID == "" {
		return nil, nodereq.Missing("volume_id")
	}
	if req.GetEncryptionKey() != "" {
		return nil, status.Error(codes.InvalidArgument, "encryption_key: monoceph makes each new DEK itself (random, as at CreateVolume); a key chosen by the caller is not supported")
	}
	cred, err := nodereq.Credentials(req.GetSecrets())
	if err != nil {
		return nil, err
	}
	ctx, log, unlock, err := nodereq.Lock(ctx, s.opts.Locks, "EncryptionKeyRotate", volumeID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	img, err := s.rotationImage(volumeID, req.GetParameters())
	if err != nil {
		return nil, err
	}
	cluster, err := s.opts.Clusters.RBDCluster(img.ClusterID)
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if img.Encrypted && !img.Librbd {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is encrypted by ceph-csi (dm-crypt), which monoceph does not open: its key cannot be rotated here", volumeID)
	}
	if s.opts.Pool == nil {
		return nil, status.Error(codes.Internal, "no Ceph connection pool to rotate the key with")
	}
	conn, err := s.opts.Pool.Get(ctx, cluster.MonHost(), cred)
	if err != nil {
		return nil, errorStatus("connecting to cluster "+img.ClusterID, err)
	}
	defer conn.Release()
	start := time.Now()
	loc := radosop.Location{Conn: conn, Pool: img.Pool, Namespace: img.Namespace}
	var pause time.Duration
	// The RPC returns by its deadline (ceph.Call) and the volume's operation lock is free
	// then: a rotation past the deadline stops at its next step (each is crash-safe, a retry
	// finishes it), but a librbd call it is in cannot be cancelled (a header write waits for
	// librbd's exclusive lock as long as its owner keeps it). Until that call ends the
	// rotation's RADOS lock stays taken and renewed (lockRotation), which is what keeps a
	// retry, here or on another node, out (ABORTED): the op lock would add nothing but keep
	// NodeUnstageVolume, which closes the lock's owner, out for up to ceph.MaxLinger.
	_, err = radosop.With(linger.Without(ctx), loc, "rotate the key of "+img.Name, func(io *rados.IOContext) (struct{}, error) {
		var err error
		pause, err = s.rotate(ctx, io, img.Name, volumeID, req.GetSecrets())
		return struct{}{}, err
	})
	if err != nil {
		// a status rotate answered, without ceph.Call's wrapping around its message
		var st interface{ GRPCStatus() *status.Status }
		if errors.As(err, &st) {
			return nil, st.GRPCStatus().Err()
		}
		return nil, status.Errorf(ceph.CodeOf(err), "rotating the key of volume %q: %v", volumeID, err)
	}
	log.V(2).Info("Encryption key rotated", "image", img.Name, "duration", time.Since(start), "longestHeaderWrite", pause)
	return &ekrpb.EncryptionKeyRotateResponse{}, nil
}

// rotationImage is where the volume's image is: the request's volume context, or the staging
// record's.
func (s *Server) rotationImage(volumeID string, params map[string]string) (volumecontext.Image, error) {
	if len(params) > 0 {
		img, err := volumecontext.Parse(params)
		if err != nil {
			return img, status.Errorf(codes.InvalidArgument, "parameters (the volume context): %v", err)
		}
		return img, nil
	}
	rec, err := s.findRecord(volumeID, "")
	if err != nil {
		return volumecontext.Image{}, status.Error(codes.Internal, err.Error())
	}
	if rec == nil {
		return volumecontext.Image{}, status.Errorf(codes.InvalidArgument, "parameters (the volume context) are missing, and volume %q is not staged on this node to find its image by", volumeID)
	}
	a := rec.Attachment.Image
	return volumecontext.Image{ClusterID: rec.ClusterID, Pool: a.Pool, Namespace: a.Namespace, Name: a.Name, Mounter: rec.Mounter}, nil
}

// rotate runs kms.Rotate on image name, opened without its encryption (the raw LUKS header is
// its first bytes). It returns the longest header write: how long the writer of a staged
// volume may wait for librbd's exclusive lock.
func (s *Server) rotate(ctx context.Context, io *rados.IOContext, name, volumeID string, secrets map[string]string) (time.Duration, error) {
	img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
	if ceph.Is(err, ceph.ErrNotFound) {
		return 0, status.Errorf(codes.NotFound, "volume %q: image %s does not exist", volumeID, name)
	}
	if err != nil {
		return 0, err
	}
	defer img.Close()
	v, err := img.GetMetadata(kms.StateKey)
	if ceph.Is(err, ceph.ErrNotFound) {
		return 0, status.Errorf(codes.FailedPrecondition, "volume %q is not encrypted: it has no key to rotate", volumeID)
	}
	if err != nil {
		return 0, err
	}
	st, err := kms.ParseImageState(v)
	if err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	if st.VolumeID != volumeID {
		return 0, status.Errorf(codes.NotFound, "image %s is volume %q's, not %q's", name, st.VolumeID, volumeID)
	}
	// asked again (imageHeader.Check) once the pending DEK is recorded and before it is
	// committed: a snapshot may be cut meanwhile
	if why, err := snapshotsRefusal(img); err != nil {
		return 0, err
	} else if why != "" {
		return 0, status.Errorf(codes.FailedPrecondition, "volume %q: %s", volumeID, why)
	}
	ks, err := s.opts.KMS.KeyStore(st.KMSID, volumeID, secrets, imageMetadata{img})
	if err != nil {
		return 0, rotationStatus(volumeID, st.KMSID, err)
	}
	ks = rotationKeyStore(ks)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	lease, unlock, err := lockRotation(ctx, io, img, volumeID)
	if err != nil {
		return 0, err
	}
	defer unlock()
	// the header is read under the lock: another node's rotation may just have changed it
	raw := make([]byte, st.HeaderBytes)
	if _, err := img.ReadAt(raw, 0); err != nil {
		return 0, err
	}
	h, err := luks.Load(raw)
	if err != nil {
		return 0, status.Errorf(codes.Internal, "image %s: %v", name, err)
	}
	defer h.Close()
	hdr := &imageHeader{ctx: ctx, img: img, h: h, on: raw, lease: lease}
	// one KDF slot for the whole rotation: it runs argon2id two to four times
	err = kms.WithKDFSlot(ctx, func() error { return kms.Rotate(ctx, ks, hdr) })
	if err != nil {
		return hdr.pause, rotationStatus(volumeID, st.KMSID, err)
	}
	return hdr.pause, nil
}

// rotationLockName is the RADOS lock on the image's header object that keeps two nodes from
// rotating one volume at once (the op locks are per node): each edits a copy of the header of
// its own, and the later write would drop the slot the other added.
const rotationLockName = kms.RotationLockName

// rotationLease is how long the lock holds without renewal: a plugin killed while holding it
// keeps other rotations of the volume out (ABORTED) until it expires.
var rotationLease = time.Minute

// rotationKeyStore lets a test wrap the key store of a rotation (one that blocks).
var rotationKeyStore = func(ks kms.KeyStore) kms.KeyStore { return ks }

// lockRotation takes the rotation lock of img, renewed every third of its lease until the
// returned function releases it or a renewal fails (the clock says until when it holds);
// ABORTED while another holds it. It is renewed past ctx's end too, for as long as the
// rotation is in a call that cannot be cancelled: a header write that reached the image after
// another rotation's would drop the slot that one added.
func lockRotation(ctx context.Context, io *rados.IOContext, img *rbd.Image, volumeID string) (*leaseClock, func(), error) {
	id, err := img.GetId()
	if err != nil {
		return nil, nil, err
	}
	oid := "rbd_header." + id
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, nil, err
	}
	cookie := hex.EncodeToString(b[:])
	lease := rotationLease
	clock := &leaseClock{lease: lease}
	sent := time.Now()
	ret, err := io.LockExclusive(oid, rotationLockName, cookie, "key rotation", lease, nil)
	if err != nil {
		return nil, nil, err
	}
	if ret != 0 {
		return nil, nil, status.Errorf(codes.Aborted, "volume %q: another key rotation holds its lock (on another node, or a killed plugin's, which lapses within %v)", volumeID, lease)
	}
	clock.renewed(sent, nil)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		renew := byte(1) // LIBRADOS_LOCK_FLAG_MAY_RENEW
		go func() {
			select {
			case <-stop:
			case <-ctx.Done():
				klog.InfoS("Key rotation still in a Ceph call past its caller's deadline; its lock stays renewed until the call ends", "volumeID", volumeID)
			}
		}()
		clock.renewLoop(stop, func() error {
			ret, err := io.LockExclusive(oid, rotationLockName, cookie, "key rotation", lease, &renew)
			if err == nil && ret != 0 {
				err = fmt.Errorf("lock answered %d", ret)
			}
			if err != nil {
				klog.InfoS("Renewing the key rotation lock failed; the rotation stops before its next change", "volumeID", volumeID, "err", err)
			}
			return err
		})
	}()
	return clock, func() {
		close(stop)
		<-done
		if _, err := io.Unlock(oid, rotationLockName, cookie); err != nil {
			klog.InfoS("Releasing the key rotation lock failed; it lapses with its lease", "volumeID", volumeID, "err", err)
		}
	}, nil
}

// rotationStatus is the status of a KMS or rotation error.
func rotationStatus(volumeID, kmsID string, err error) error {
	switch {
	case errors.Is(err, kms.ErrDefaultRotation):
		return status.Errorf(codes.FailedPrecondition, "volume %q: %v", volumeID, err)
	case errors.Is(err, kms.ErrUnknownKMS), errors.Is(err, kms.ErrUnsupported):
		return status.Errorf(codes.FailedPrecondition, "volume %q is encrypted with KMS %q, which this node's KMS configuration cannot use: %v", volumeID, kmsID, err)
	case errors.Is(err, kms.ErrMissingPassphrase), errors.Is(err, kms.ErrMissingToken):
		return status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	case errors.Is(err, kms.ErrWrongPassphrase):
		return status.Errorf(codes.InvalidArgument, "volume %q: the secrets' %s does not unwrap its DEK", volumeID, kms.PassphraseKey)
	case errors.Is(err, kms.ErrUnavailable):
		return status.Errorf(codes.Unavailable, "KMS %q: %v", kmsID, err)
	case errors.Is(err, kms.ErrDenied):
		return status.Errorf(codes.PermissionDenied, "KMS %q (the token of the secrets): %v", kmsID, err)
	case errors.Is(err, kms.ErrConfig):
		return status.Errorf(codes.FailedPrecondition, "KMS %q: %v", kmsID, err)
	case errors.Is(err, errLeaseLost):
		return status.Errorf(codes.Aborted, "volume %q: %v", volumeID, err)
	case errors.Is(err, kms.ErrRefused):
		return status.Errorf(codes.FailedPrecondition, "volume %q: %v", volumeID, err)
	case errors.Is(err, kms.ErrStaleKey), errors.Is(err, kms.ErrNoDEK):
		return status.Errorf(codes.Internal, "volume %q: %v", volumeID, err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(ceph.CodeOf(err), "volume %q: %v", volumeID, err)
}

// FaultHeaderWrite is the fault point after the first extent of a header write: a slot's area
// is on the image, the JSON copies that would reference it are not.
const FaultHeaderWrite = "rbd.EncryptionKeyRotate.header-write"

// imageHeader is the image's LUKS header as kms.KeySlots: each change is written back to the
// image (luks.Changes says what, in which order) before Add or Destroy returns.
type imageHeader struct {
	// ctx ends the rotation between two writes (a crash-safe point, see luks.Changes)
	ctx context.Context
	img *rbd.Image
	h   *luks.Header
	on  []byte // the header as the image has it
	// pause is the longest write (with its flush)
	pause time.Duration
	// lease is the rotation lock's: no write starts unless it holds (nil: no lock)
	lease *leaseClock
}

func (x *imageHeader) Unlock(key []byte) (int, error) {
	slot, err := x.h.Unlock(key)
	if errors.Is(err, luks.ErrWrongKey) {
		return slot, kms.ErrWrongKey
	}
	return slot, err
}

func (x *imageHeader) Add(old, key []byte) (int, error) {
	slot, err := x.h.Add(old, key)
	if errors.Is(err, luks.ErrWrongKey) {
		return slot, kms.ErrWrongKey
	}
	if err != nil {
		return slot, err
	}
	return slot, x.write()
}

func (x *imageHeader) Slots() []int { return x.h.Slots() }

func (x *imageHeader) Destroy(slot int) error {
	if err := x.h.Destroy(slot); err != nil {
		return err
	}
	return x.write()
}

// write puts the changed bytes on the image, each extent flushed before the next is written:
// the order luks.Changes gives is the order they become durable.
func (x *imageHeader) write() error {
	next, err := x.h.Bytes()
	if err != nil {
		return err
	}
	ext, err := luks.Changes(x.on, next)
	if err != nil {
		return err
	}
	for _, e := range ext {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		if x.lease != nil {
			if err := x.lease.held(time.Now()); err != nil {
				return err
			}
		}
		start := time.Now()
		if _, err := x.img.WriteAt(next[e.Off:e.Off+int64(e.Len)], e.Off); err != nil {
			return err
		}
		if err := x.img.Flush(); err != nil {
			return err
		}
		x.pause = max(x.pause, time.Since(start))
		faultpoint.Hit(FaultHeaderWrite)
	}
	x.on = next
	return nil
}

// imageMetadata is an image's metadata as kms.ImageMetadata.
type imageMetadata struct{ img *rbd.Image }

func (m imageMetadata) Get(key string) (string, error) {
	v, err := m.img.GetMetadata(key)
	if ceph.Is(err, ceph.ErrNotFound) {
		return "", kms.ErrNoMetadata
	}
	return v, err
}

func (m imageMetadata) Set(key, value string) error { return m.img.SetMetadata(key, value) }

func (m imageMetadata) Remove(key string) error {
	if err := m.img.RemoveMetadata(key); err != nil && !ceph.Is(err, ceph.ErrNotFound) {
		return err
	}
	return nil
}
