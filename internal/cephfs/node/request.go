package node

import (
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Request checks follow the order of the fields in the CSI spec, so the first missing one is
// the one named, and messages name fields as the spec does.

func missing(field string) error {
	return status.Errorf(codes.InvalidArgument, "%s is missing", field)
}

// absPath checks a required path field and returns it cleaned.
func absPath(field, p string) (string, error) {
	if p == "" {
		return "", missing(field)
	}
	if !filepath.IsAbs(p) {
		return "", status.Errorf(codes.InvalidArgument, "%s %q is not an absolute path", field, p)
	}
	return filepath.Clean(p), nil
}

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
	case *csi.VolumeCapability_Mount:
		a.mountFlags = t.Mount.GetMountFlags()
	case *csi.VolumeCapability_Block:
		return access{}, status.Error(codes.FailedPrecondition, "volume_capability: CephFS volumes have no block access")
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
	vol         volumecontext.Volume
	cred        ceph.Credentials
}

func parseStage(req *csi.NodeStageVolumeRequest) (stageRequest, error) {
	r := stageRequest{volumeID: req.GetVolumeId()}
	if r.volumeID == "" {
		return r, missing("volume_id")
	}
	var err error
	if r.stagingPath, err = absPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return r, err
	}
	if r.access, err = parseCapability(req.GetVolumeCapability()); err != nil {
		return r, err
	}
	if r.cred, err = ceph.CredentialsFromSecrets(req.GetSecrets()); err != nil {
		// names the secret, never its value
		return r, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	}
	if r.vol, err = volumecontext.Parse(req.GetVolumeContext()); err != nil {
		return r, status.Error(codes.InvalidArgument, err.Error())
	}
	return r, nil
}

func parseUnstage(req *csi.NodeUnstageVolumeRequest) (volumeID, stagingPath string, err error) {
	if req.GetVolumeId() == "" {
		return "", "", missing("volume_id")
	}
	stagingPath, err = absPath("staging_target_path", req.GetStagingTargetPath())
	return req.GetVolumeId(), stagingPath, err
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
	if r.volumeID == "" {
		return r, missing("volume_id")
	}
	var err error
	if r.targetPath, err = absPath("target_path", req.GetTargetPath()); err != nil {
		return r, err
	}
	a, err := parseCapability(req.GetVolumeCapability())
	if err != nil {
		return r, err
	}
	// the plugin has STAGE_UNSTAGE_VOLUME, so the spec makes a missing staging path
	// FAILED_PRECONDITION ("Staging target path not set"); malformed required fields are
	// checked first, as INVALID_ARGUMENT
	if req.GetStagingTargetPath() == "" {
		return r, status.Error(codes.FailedPrecondition, "staging_target_path is missing: NodeStageVolume must succeed first")
	}
	if r.stagingPath, err = absPath("staging_target_path", req.GetStagingTargetPath()); err != nil {
		return r, err
	}
	if len(r.secrets) > 0 {
		if _, err := ceph.CredentialsFromSecrets(r.secrets); err != nil {
			return r, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
		}
	}
	r.readOnly = req.GetReadonly() || a.readOnly
	return r, nil
}

func parseUnpublish(req *csi.NodeUnpublishVolumeRequest) (volumeID, targetPath string, err error) {
	if req.GetVolumeId() == "" {
		return "", "", missing("volume_id")
	}
	targetPath, err = absPath("target_path", req.GetTargetPath())
	return req.GetVolumeId(), targetPath, err
}

// pathRequest is a checked NodeGetVolumeStatsRequest or NodeGetVolumeHealthRequest.
type pathRequest struct {
	volumeID    string
	volumePath  string // required for stats, optional for health
	stagingPath string // optional
}

func parsePathRequest(volumeID, pathField, volumePath, stagingPath string, pathRequired bool) (pathRequest, error) {
	if volumeID == "" {
		return pathRequest{}, missing("volume_id")
	}
	r := pathRequest{volumeID: volumeID}
	var err error
	if volumePath != "" && !filepath.IsAbs(volumePath) {
		// a relative path cannot be where this node published anything: the spec's answer
		// for a volume that is not at the path is NOT_FOUND
		return r, status.Errorf(codes.NotFound, "volume %q is not at %s %q: not an absolute path", volumeID, pathField, volumePath)
	}
	if volumePath != "" || pathRequired {
		if r.volumePath, err = absPath(pathField, volumePath); err != nil {
			return r, err
		}
	}
	if stagingPath != "" {
		if r.stagingPath, err = absPath("staging_target_path", stagingPath); err != nil {
			return r, err
		}
	}
	return r, nil
}
