package node

import (
	"fmt"
	"slices"

	"github.com/monoceph/monoceph/internal/nodestate"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"k8s.io/klog/v2"
)

// record is what NodeStageVolume set up for a volume. It is written before anything is
// attached and again after each step, so a plugin killed at any point leaves enough behind for
// NodeUnstageVolume to undo it all.
type record struct {
	Version     int      `json:"version"`
	VolumeID    string   `json:"volumeID"`
	State       string   `json:"state"`
	StagingPath string   `json:"stagingPath"`
	ClusterID   string   `json:"clusterID"`
	Mounter     string   `json:"mounter"`
	Block       bool     `json:"block"`
	FsType      string   `json:"fsType,omitempty"`
	MountFlags  []string `json:"mountFlags,omitempty"`
	ReadOnly    bool     `json:"readOnly"`
	// CephUser is the Ceph user the attachment authenticated as (with the recovery key, what
	// Recover reattaches with).
	CephUser string `json:"cephUser,omitempty"`
	// Attachment is what the mounter set up: device, FUSE directory, work directory.
	Attachment attach.Attachment `json:"attachment"`
	// ReadOnlyLayers are the read-only loop devices block publishes put over the device, by
	// target path. Each is recorded before it is bound to the device, so one left by a
	// publish that died before its bind mount is found by the retry or by unpublish.
	ReadOnlyLayers map[string]string `json:"readOnlyLayers,omitempty"`
}

const (
	recordVersion = 1
	// stateAttaching: stage began; parts of it may exist.
	stateAttaching = "attaching"
	// stateStaged: the device is attached (and for mount access, mounted at the staging path).
	stateStaged = "staged"
)

// readRecord returns the record of a staging path as the file has it, or nil when there is
// none. The node works with loadRecord's answer.
func readRecord(stagingPath string) (*record, error) {
	return nodestate.ReadRecord[record](stagingPath, recordVersion)
}

// loadRecord returns the record of a staging path, or nil when there is none, with the
// attachment's work directory (and the FUSE mount point in it) derived from the volume ID
// whatever the file says. The file lives next to the staging path, outside the state
// directory, and detaching removes key files and directories there: never in a directory read
// back from a file. (The field is still written, for people and older versions.)
func (s *Server) loadRecord(stagingPath string) (*record, error) {
	r, err := readRecord(stagingPath)
	if err != nil || r == nil {
		return r, err
	}
	if dir := s.workDir(r.VolumeID); r.Attachment.WorkDir != dir {
		klog.InfoS("Staging record names another work directory; using the one of its volume", "record", nodestate.RecordPath(stagingPath),
			"recorded", r.Attachment.WorkDir, "workDir", dir)
	}
	r.Attachment = r.Attachment.InWorkDir(s.workDir(r.VolumeID))
	return r, nil
}

// write replaces the record atomically: a crash leaves the old record or the new one, never a
// torn file.
func (r *record) write() error {
	r.Version = recordVersion
	return nodestate.WriteRecord(r.StagingPath, r)
}

func (r *record) remove() error { return nodestate.RemoveRecord(r.StagingPath) }

// conflict explains why a stage request does not match what is staged, or returns "".
func (r *record) conflict(req stageRequest) string {
	img := req.image
	switch {
	case r.ClusterID != img.ClusterID || r.Attachment.Image != (attach.Image{Pool: img.Pool, Namespace: img.Namespace, Name: img.Name}):
		return fmt.Sprintf("it holds image %s of cluster %s", r.Attachment.Image.Spec(), r.ClusterID)
	case r.Mounter != img.Mounter:
		return fmt.Sprintf("it is attached with mounter %s, not %s", r.Mounter, img.Mounter)
	case r.Block != req.access.block:
		return fmt.Sprintf("it is staged for %s access", accessType(r.Block))
	case r.FsType != req.access.fsType:
		return fmt.Sprintf("it is staged with fs_type %s", r.FsType)
	case !sameFlags(r.MountFlags, req.access.mountFlags):
		return fmt.Sprintf("it is staged with mount_flags %v", r.MountFlags)
	case r.ReadOnly != req.access.readOnly:
		return fmt.Sprintf("it is staged %s", map[bool]string{true: "read-only", false: "read-write"}[r.ReadOnly])
	}
	return ""
}

// setLayer records the read-only loop device of a block publish at target ("" forgets it).
func (r *record) setLayer(target, loop string) {
	if loop == "" {
		delete(r.ReadOnlyLayers, target)
		return
	}
	if r.ReadOnlyLayers == nil {
		r.ReadOnlyLayers = map[string]string{}
	}
	r.ReadOnlyLayers[target] = loop
}

func accessType(block bool) string {
	if block {
		return "block"
	}
	return "mount"
}

func sameFlags(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// newRecord starts the record of a volume about to be staged.
func newRecord(req stageRequest, workDir string) *record {
	return &record{
		VolumeID:    req.volumeID,
		State:       stateAttaching,
		StagingPath: req.stagingPath,
		ClusterID:   req.image.ClusterID,
		Mounter:     req.image.Mounter,
		Block:       req.access.block,
		FsType:      req.access.fsType,
		MountFlags:  req.access.mountFlags,
		ReadOnly:    req.access.readOnly,
		Attachment: attach.Attachment{
			Image:    attach.Image{Pool: req.image.Pool, Namespace: req.image.Namespace, Name: req.image.Name},
			ReadOnly: req.access.readOnly,
			WorkDir:  workDir,
		},
	}
}

// workDir is the per-volume directory under the state directory.
func (s *Server) workDir(volumeID string) string { return nodestate.WorkDir(s.opts.StateDir, volumeID) }

func (s *Server) writeIndex(r *record) error {
	return nodestate.WriteIndex(r.Attachment.WorkDir, r.StagingPath)
}

// findRecord returns the record of a volume: at stagingPath when given, else through the
// volume's index link. It returns nil when the volume is not staged on this node.
func (s *Server) findRecord(volumeID, stagingPath string) (*record, error) {
	if stagingPath == "" {
		indexed, ok, err := nodestate.IndexedStagingPath(s.workDir(volumeID))
		if err != nil || !ok {
			return nil, err
		}
		stagingPath = indexed
	}
	r, err := s.loadRecord(stagingPath)
	if err != nil || r == nil || r.VolumeID != volumeID {
		return nil, err
	}
	return r, nil
}
