package node

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/nodereq"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Request checks follow the order of the fields in the CSI spec (see nodereq), so the first
// missing one is the one named, and messages name fields as the spec does.

// access is what a volume capability asks of the node.
type access struct {
	mountFlags []string
	readOnly   bool // a reader-only access mode
}

// parseCapability checks a volume capability. CephFS volumes are filesystems only: block
// access exceeds what the volume can do (FAILED_PRECONDITION, as the spec's tables say).
// fs_type is ignored: the filesystem is CephFS whatever a CO fills in (external-provisioner
// may default it to ext4).
func parseCapability(c *csi.VolumeCapability) (access, error) {
	readOnly, err := nodereq.Capability(c)
	if err != nil {
		return access{}, err
	}
	a := access{readOnly: readOnly}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Mount:
		a.mountFlags = t.Mount.GetMountFlags()
	case *csi.VolumeCapability_Block:
		return access{}, status.Error(codes.FailedPrecondition, "volume_capability: CephFS volumes have no block access")
	}
	return a, nil
}

// stageRequest is a checked NodeStageVolumeRequest.
type stageRequest struct {
	volumeID    string
	stagingPath string
	access      access
	vol         volumecontext.Volume
	cred        ceph.Credentials
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
	if r.cred, err = nodereq.Credentials(req.GetSecrets(), ceph.AdminFirst...); err != nil {
		return r, err
	}
	if r.vol, err = volumecontext.Parse(req.GetVolumeContext()); err != nil {
		return r, status.Error(codes.InvalidArgument, err.Error())
	}
	return r, nil
}

// publishRequest is a checked NodePublishVolumeRequest.
type publishRequest struct {
	volumeID    string
	stagingPath string
	targetPath  string
	readOnly    bool // the readonly flag or a reader-only access mode
	// secrets are optional here; when present they remount a broken staging mount
	secrets map[string]string
}

func parsePublish(req *csi.NodePublishVolumeRequest) (publishRequest, error) {
	r := publishRequest{volumeID: req.GetVolumeId(), secrets: req.GetSecrets()}
	var err error
	if r.targetPath, err = nodereq.VolumeAndPath(r.volumeID, "target_path", req.GetTargetPath()); err != nil {
		return r, err
	}
	a, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return r, err
	}
	if r.stagingPath, err = nodereq.PublishStagingPath(req.GetStagingTargetPath()); err != nil {
		return r, err
	}
	if len(r.secrets) > 0 {
		if _, err := nodereq.Credentials(r.secrets, ceph.AdminFirst...); err != nil {
			return r, err
		}
	}
	r.readOnly = req.GetReadonly() || a.readOnly
	return r, nil
}
