package node

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/monoceph/monoceph/internal/rbd/attach"
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
	// Attachment is what the mounter set up: device, rbd-fuse directory, work directory.
	Attachment attach.Attachment `json:"attachment"`
}

const (
	recordVersion = 1
	// stateAttaching: stage began; parts of it may exist.
	stateAttaching = "attaching"
	// stateStaged: the device is attached (and for mount access, mounted at the staging path).
	stateStaged = "staged"
)

// recordSuffix names the record next to the staging path. Not inside it: the staging path
// of a mount volume is covered by the filesystem mounted on it.
const recordSuffix = ".monoceph.json"

func recordPath(stagingPath string) string { return filepath.Clean(stagingPath) + recordSuffix }

// readRecord returns the record of a staging path, or nil when there is none.
func readRecord(stagingPath string) (*record, error) {
	b, err := os.ReadFile(recordPath(stagingPath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("staging record %s: %w", recordPath(stagingPath), err)
	}
	if r.Version != recordVersion {
		return nil, fmt.Errorf("staging record %s: version %d, want %d", recordPath(stagingPath), r.Version, recordVersion)
	}
	return &r, nil
}

// write replaces the record atomically: a crash leaves the old record or the new one, never a
// torn file.
func (r *record) write() error {
	r.Version = recordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	path := recordPath(r.StagingPath)
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (r *record) remove() error {
	return ignoreNotExist(os.Remove(recordPath(r.StagingPath)))
}

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

// workDir is the per-volume directory under the state directory. Volume IDs are hashed: they
// may hold any character and be up to 128 bytes long.
func (s *Server) workDir(volumeID string) string {
	sum := sha256.Sum256([]byte(volumeID))
	return filepath.Join(s.opts.StateDir, hex.EncodeToString(sum[:12]))
}

// indexName is a symbolic link in the work directory to the volume's record, for calls that
// do not carry the staging path.
const indexName = "record"

func (s *Server) writeIndex(r *record) error {
	link := filepath.Join(r.Attachment.WorkDir, indexName)
	if target, err := os.Readlink(link); err == nil && target == recordPath(r.StagingPath) {
		return nil
	}
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(recordPath(r.StagingPath), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// findRecord returns the record of a volume: at stagingPath when given, else through the
// volume's index link. It returns nil when the volume is not staged on this node.
func (s *Server) findRecord(volumeID, stagingPath string) (*record, error) {
	if stagingPath == "" {
		target, err := os.Readlink(filepath.Join(s.workDir(volumeID), indexName))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(target, recordSuffix) {
			return nil, fmt.Errorf("index %s points to %q, not a staging record", filepath.Join(s.workDir(volumeID), indexName), target)
		}
		stagingPath = strings.TrimSuffix(target, recordSuffix)
	}
	r, err := readRecord(stagingPath)
	if err != nil || r == nil || r.VolumeID != volumeID {
		return nil, err
	}
	return r, nil
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
