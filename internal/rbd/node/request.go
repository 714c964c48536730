package node

import (
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Request checks follow the order of the fields in the CSI spec (see nodereq), so the first
// missing one is the one named, and messages name the field as the spec does.

// Filesystems this node formats and grows.
const defaultFsType = "ext4"

var fsTypes = []string{"ext4", "xfs"}

// access is what a volume capability asks of the node.
type access struct {
	block      bool
	fsType     string // mount only; defaulted
	mountFlags []string
	readOnly   bool // a reader-only access mode, or published read-only
	mode       csi.VolumeCapability_AccessMode_Mode
}

// parseCapability checks a volume capability: an access type and an access mode must be set
// (INVALID_ARGUMENT), the filesystem must be one this node makes and no filesystem may be
// shared by writers on several nodes (FAILED_PRECONDITION, the spec's "exceeds capabilities").
func parseCapability(c *csi.VolumeCapability) (access, error) {
	readOnly, err := nodereq.Capability(c)
	if err != nil {
		return access{}, err
	}
	a := access{readOnly: readOnly, mode: c.GetAccessMode().GetMode()}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		a.block = true
	case *csi.VolumeCapability_Mount:
		a.fsType = t.Mount.GetFsType()
		if a.fsType == "" {
			a.fsType = defaultFsType
		}
		if !slices.Contains(fsTypes, a.fsType) {
			return access{}, status.Errorf(codes.FailedPrecondition, "volume_capability.mount.fs_type %q is not supported (%v)", a.fsType, fsTypes)
		}
		a.mountFlags = t.Mount.GetMountFlags()
		if mode := c.GetAccessMode().GetMode(); mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
			// ext4 and xfs are not cluster filesystems: writers on two nodes corrupt them
			return access{}, status.Errorf(codes.FailedPrecondition, "volume_capability: access mode %s needs access_type block", mode)
		}
	}
	return a, nil
}

// stageRequest is a checked NodeStageVolumeRequest.
type stageRequest struct {
	volumeID    string
	stagingPath string
	access      access
	image       volumecontext.Image
	cred        ceph.Credentials
	// enc opens an encrypted volume (see Server.encryption); key material, never persisted
	enc *attach.Encryption
}

func parseStage(req *csi.NodeStageVolumeRequest) (stageRequest, error) {
	r := stageRequest{volumeID: req.GetVolumeId()}
	var err error
	if r.stagingPath, err = nodereq.VolumeAndPath(r.volumeID, "staging_target_path", req.GetStagingTargetPath()); err != nil {
		return r, err
	}
	if r.access, err = parseCapability(req.GetVolumeCapability()); err != nil {
		return r, err
	}
	if r.image, err = volumecontext.Parse(req.GetVolumeContext()); err != nil {
		return r, status.Error(codes.InvalidArgument, err.Error())
	}
	if r.cred, err = nodereq.Credentials(req.GetSecrets()); err != nil {
		return r, err
	}
	// published read-only (PUBLISH_READONLY): attach a device that refuses writes
	if req.GetPublishContext()[publishContextReadOnly] == "true" {
		r.access.readOnly = true
	}
	return r, nil
}

// publishContextReadOnly is the publish_context key of a read-only ControllerPublishVolume
// (rbd.PublishContextReadOnly; the node does not import the controller).
const publishContextReadOnly = "readonly"

// publishRequest is a checked NodePublishVolumeRequest.
type publishRequest struct {
	volumeID    string
	stagingPath string
	targetPath  string
	access      access
	readOnly    bool // the readonly flag or a reader-only access mode
}

func parsePublish(req *csi.NodePublishVolumeRequest) (publishRequest, error) {
	r := publishRequest{volumeID: req.GetVolumeId()}
	var err error
	if r.targetPath, err = nodereq.VolumeAndPath(r.volumeID, "target_path", req.GetTargetPath()); err != nil {
		return r, err
	}
	if r.access, err = parseCapability(req.GetVolumeCapability()); err != nil {
		return r, err
	}
	if r.stagingPath, err = nodereq.PublishStagingPath(req.GetStagingTargetPath()); err != nil {
		return r, err
	}
	r.readOnly = req.GetReadonly() || r.access.readOnly
	return r, nil
}
