package node

import (
	"path/filepath"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Request checks follow the order of the fields in the CSI spec, so the first missing one is
// the one named, and messages name the field as the spec does.

func missing(field string) error {
	return status.Errorf(codes.InvalidArgument, "%s is missing", field)
}

// absPath checks a required path field.
func absPath(field, p string) error {
	if p == "" {
		return missing(field)
	}
	if !filepath.IsAbs(p) {
		return status.Errorf(codes.InvalidArgument, "%s %q is not an absolute path", field, p)
	}
	return nil
}

// Filesystems this node formats and grows.
const defaultFsType = "ext4"

var fsTypes = []string{"ext4", "xfs"}

// access is what a volume capability asks of the node.
type access struct {
	block      bool
	fsType     string // mount only; defaulted
	mountFlags []string
	readOnly   bool // a reader-only access mode
}

// parseCapability checks a volume capability: an access type and an access mode must be set
// (INVALID_ARGUMENT), the filesystem must be one this node makes and no filesystem may be
// shared by writers on several nodes (FAILED_PRECONDITION, the spec's "exceeds capabilities").
func parseCapability(c *csi.VolumeCapability) (access, error) {
	if c == nil {
		return access{}, missing("volume_capability")
	}
	mode := c.GetAccessMode().GetMode()
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return access{}, missing("volume_capability.access_mode")
	}
	a := access{readOnly: mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY}
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
		if mode == csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
			// ext4 and xfs are not cluster filesystems: writers on two nodes corrupt them
			return access{}, status.Errorf(codes.FailedPrecondition, "volume_capability: access mode %s needs access_type block", mode)
		}
	default:
		return access{}, missing("volume_capability.access_type")
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
}

func parseStage(req *csi.NodeStageVolumeRequest) (stageRequest, error) {
	r := stageRequest{volumeID: req.GetVolumeId(), stagingPath: req.GetStagingTargetPath()}
	if r.volumeID == "" {
		return r, missing("volume_id")
	}
	if err := absPath("staging_target_path", r.stagingPath); err != nil {
		return r, err
	}
	r.stagingPath = filepath.Clean(r.stagingPath)
	var err error
	if r.access, err = parseCapability(req.GetVolumeCapability()); err != nil {
		return r, err
	}
	if r.image, err = volumecontext.Parse(req.GetVolumeContext()); err != nil {
		return r, status.Error(codes.InvalidArgument, err.Error())
	}
	if r.cred, err = ceph.CredentialsFromSecrets(req.GetSecrets()); err != nil {
		// the message names the secret, never its value
		return r, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	}
	return r, nil
}

func parseUnstage(req *csi.NodeUnstageVolumeRequest) (volumeID, stagingPath string, err error) {
	if req.GetVolumeId() == "" {
		return "", "", missing("volume_id")
	}
	if err := absPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return "", "", err
	}
	return req.GetVolumeId(), filepath.Clean(req.GetStagingTargetPath()), nil
}

// publishRequest is a checked NodePublishVolumeRequest.
type publishRequest struct {
	volumeID    string
	stagingPath string
	targetPath  string
	access      access
	readOnly    bool // the readonly flag or a reader-only access mode
}

func parsePublish(req *csi.NodePublishVolumeRequest) (publishRequest, error) {
	r := publishRequest{volumeID: req.GetVolumeId(), stagingPath: req.GetStagingTargetPath(), targetPath: req.GetTargetPath()}
	if r.volumeID == "" {
		return r, missing("volume_id")
	}
	if err := absPath("target_path", r.targetPath); err != nil {
		return r, err
	}
	var err error
	if r.access, err = parseCapability(req.GetVolumeCapability()); err != nil {
		return r, err
	}
	// this plugin has STAGE_UNSTAGE_VOLUME, so the spec makes a missing staging path
	// FAILED_PRECONDITION ("Staging target path not set"); malformed required fields are
	// checked first, as INVALID_ARGUMENT
	if r.stagingPath == "" {
		return r, status.Error(codes.FailedPrecondition, "staging_target_path is missing: NodeStageVolume must succeed first")
	}
	if err := absPath("staging_target_path", r.stagingPath); err != nil {
		return r, err
	}
	r.stagingPath, r.targetPath = filepath.Clean(r.stagingPath), filepath.Clean(r.targetPath)
	r.readOnly = req.GetReadonly() || r.access.readOnly
	return r, nil
}

func parseUnpublish(req *csi.NodeUnpublishVolumeRequest) (volumeID, targetPath string, err error) {
	if req.GetVolumeId() == "" {
		return "", "", missing("volume_id")
	}
	if err := absPath("target_path", req.GetTargetPath()); err != nil {
		return "", "", err
	}
	return req.GetVolumeId(), filepath.Clean(req.GetTargetPath()), nil
}

// pathRequest is a checked NodeExpandVolumeRequest or NodeGetVolumeStatsRequest.
type pathRequest struct {
	volumeID    string
	volumePath  string
	stagingPath string // optional
}

func parsePathRequest(volumeID, volumePath, stagingPath string) (pathRequest, error) {
	if volumeID == "" {
		return pathRequest{}, missing("volume_id")
	}
	if volumePath == "" {
		return pathRequest{}, missing("volume_path")
	}
	// a relative path cannot be where this node published anything: the spec's answer for a
	// volume that is not at volume_path is NOT_FOUND
	if !filepath.IsAbs(volumePath) {
		return pathRequest{}, status.Errorf(codes.NotFound, "volume %q is not at volume_path %q: not an absolute path", volumeID, volumePath)
	}
	r := pathRequest{volumeID: volumeID, volumePath: filepath.Clean(volumePath)}
	if stagingPath != "" {
		if err := absPath("staging_target_path", stagingPath); err != nil {
			return pathRequest{}, err
		}
		r.stagingPath = filepath.Clean(stagingPath)
	}
	return r, nil
}
