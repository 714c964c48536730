package nodereq

import (
	"path/filepath"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Missing is the INVALID_ARGUMENT of a required field that is not set.
func Missing(field string) error {
	return status.Errorf(codes.InvalidArgument, "%s is missing", field)
}

// AbsPath checks a required path field and returns it cleaned.
func AbsPath(field, p string) (string, error) {
	if p == "" {
		return "", Missing(field)
	}
	if !filepath.IsAbs(p) {
		return "", status.Errorf(codes.InvalidArgument, "%s %q is not an absolute path", field, p)
	}
	return filepath.Clean(p), nil
}

// VolumeAndPath checks a required volume_id, then the required path field, and returns the
// path cleaned.
func VolumeAndPath(volumeID, field, p string) (string, error) {
	if volumeID == "" {
		return "", Missing("volume_id")
	}
	return AbsPath(field, p)
}

// Unstage checks a NodeUnstageVolumeRequest.
func Unstage(req *csi.NodeUnstageVolumeRequest) (volumeID, stagingPath string, err error) {
	stagingPath, err = VolumeAndPath(req.GetVolumeId(), "staging_target_path", req.GetStagingTargetPath())
	return req.GetVolumeId(), stagingPath, err
}

// Unpublish checks a NodeUnpublishVolumeRequest.
func Unpublish(req *csi.NodeUnpublishVolumeRequest) (volumeID, targetPath string, err error) {
	targetPath, err = VolumeAndPath(req.GetVolumeId(), "target_path", req.GetTargetPath())
	return req.GetVolumeId(), targetPath, err
}

// PublishStagingPath checks the staging path of a NodePublishVolumeRequest, after its
// volume_id, target_path and volume_capability. The services have STAGE_UNSTAGE_VOLUME, so the
// spec makes a missing staging path FAILED_PRECONDITION ("Staging target path not set"); a
// malformed one is INVALID_ARGUMENT.
func PublishStagingPath(p string) (string, error) {
	if p == "" {
		return "", status.Error(codes.FailedPrecondition, "staging_target_path is missing: NodeStageVolume must succeed first")
	}
	return AbsPath("staging_target_path", p)
}

// Capability checks what every volume capability must carry, an access mode and an access
// type, and reports whether the mode is a reader-only one. What the access type may be is the
// backend's to check.
func Capability(c *csi.VolumeCapability) (readOnly bool, err error) {
	if c == nil {
		return false, Missing("volume_capability")
	}
	mode := c.GetAccessMode().GetMode()
	if mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return false, Missing("volume_capability.access_mode")
	}
	if c.GetAccessType() == nil {
		return false, Missing("volume_capability.access_type")
	}
	return mode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY ||
		mode == csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY, nil
}

// Credentials checks the secrets of a request; the message names a bad secret, never its
// value.
func Credentials(secrets map[string]string, order ...ceph.SecretKeys) (ceph.Credentials, error) {
	cred, err := ceph.CredentialsFromSecrets(secrets, order...)
	if err != nil {
		return cred, status.Errorf(codes.InvalidArgument, "secrets: %v", err)
	}
	return cred, nil
}

// PathRequest is a checked request about a volume at a path: NodeExpandVolume,
// NodeGetVolumeStats or NodeGetVolumeHealth.
type PathRequest struct {
	VolumeID    string
	VolumePath  string // "" when optional and not given
	StagingPath string // optional
}

// ParsePath checks a request about a volume at the path field pathField (volume_path,
// volume_publish_path), required or not, with an optional staging path. A relative path
// cannot be where the node published anything: the spec's answer for a volume that is not at
// the path is NOT_FOUND.
func ParsePath(volumeID, pathField, volumePath, stagingPath string, pathRequired bool) (PathRequest, error) {
	if volumeID == "" {
		return PathRequest{}, Missing("volume_id")
	}
	r := PathRequest{VolumeID: volumeID}
	var err error
	if volumePath != "" && !filepath.IsAbs(volumePath) {
		return r, status.Errorf(codes.NotFound, "volume %q is not at %s %q: not an absolute path", volumeID, pathField, volumePath)
	}
	if volumePath != "" || pathRequired {
		if r.VolumePath, err = AbsPath(pathField, volumePath); err != nil {
			return r, err
		}
	}
	if stagingPath != "" {
		if r.StagingPath, err = AbsPath("staging_target_path", stagingPath); err != nil {
			return r, err
		}
	}
	return r, nil
}
