package node

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ceph-csi's RBD node plugin stages a volume differently: the device is mounted (block access:
// bind-mounted) at <staging path>/<volume ID>, and <staging path>/image-meta.json records the
// mapping, written before the map and removed last. monoceph does not adopt such a staging:
// its layout differs, rbd-nbd daemons die with ceph-csi's pod, and a kubelet that keeps
// running pods never asks to stage again. It unstages it, so a node that was not drained before
// the swap can be drained after it; staging over it is refused.

// cephcsiStashName is ceph-csi's image-meta.json.
const cephcsiStashName = "image-meta.json"

// cephcsiStash is what ceph-csi's stash holds (the fields unstaging needs).
type cephcsiStash struct {
	Pool      string `json:"pool"`
	Namespace string `json:"radosNamespace"`
	Image     string `json:"image"`
	NBD       bool   `json:"accessType"` // true: mapped with rbd-nbd
	Encrypted bool   `json:"encrypted"`
	Device    string `json:"device"`
}

// readCephCSIStash returns ceph-csi's stash at a staging path, or nil.
func readCephCSIStash(stagingPath string) (*cephcsiStash, error) {
	b, err := os.ReadFile(filepath.Join(stagingPath, cephcsiStashName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st cephcsiStash
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "ceph-csi's %s at %s: %v", cephcsiStashName, stagingPath, err)
	}
	return &st, nil
}

// unstageCephCSI undoes ceph-csi's staging: unmount, unmap, stash removed last (so an
// interrupted unstage is redone).
func (s *Server) unstageCephCSI(ctx context.Context, stagingPath, volumeID string, st *cephcsiStash) error {
	if st.Encrypted {
		return status.Errorf(codes.FailedPrecondition, "volume %q was staged by ceph-csi with encryption (a LUKS device over the image): monoceph does not support encryption, unstage it with ceph-csi", volumeID)
	}
	target := filepath.Join(stagingPath, volumeID)
	if err := hostmount.UnmountOrDetach(ctx, s.x, target); err != nil {
		return errorStatus("unmounting ceph-csi's staging mount "+target, err)
	}
	if err := ignoreNotExist(os.Remove(target)); err != nil {
		return status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	mounter := volumecontext.MounterKRBD
	if st.NBD {
		mounter = volumecontext.MounterNBD
	}
	img := attach.Image{Pool: st.Pool, Namespace: st.Namespace, Name: st.Image}
	if err := s.attachers[mounter].Detach(ctx, attach.Attachment{Image: img, Device: st.Device}); err != nil {
		return errorStatus("unmapping "+img.Spec()+" (mapped by ceph-csi)", err)
	}
	if err := ignoreNotExist(os.Remove(filepath.Join(stagingPath, cephcsiStashName))); err != nil {
		return status.Errorf(codes.Internal, "removing ceph-csi's %s: %v", cephcsiStashName, err)
	}
	return nil
}
