package node

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/monoceph/monoceph/internal/nodestate"
	"k8s.io/klog/v2"
)

// record is what NodeStageVolume set up at a staging path. It is written before anything is
// mounted and again after each change, so a plugin killed at any point leaves enough behind
// for NodeUnstageVolume to undo it and for Recover to redo it. It never holds the key.
type record struct {
	Version     int    `json:"version"`
	VolumeID    string `json:"volumeID"`
	State       string `json:"state"`
	StagingPath string `json:"stagingPath"`
	ClusterID   string `json:"clusterID"`
	FSName      string `json:"fsName"`
	// RootPath is the volume context's root path; MountedPath what is mounted at the staging
	// path (the parent of RootPath for a shallow volume the driver created).
	RootPath    string `json:"rootPath"`
	MountedPath string `json:"mountedPath"`
	// Mounter is the mounter used (fuse or kernel); RequestedMounter what the volume context
	// asked for ("" lets the node choose).
	Mounter          string `json:"mounter"`
	RequestedMounter string `json:"requestedMounter,omitempty"`
	// Options are the mounter options used: the volume's and the capability's mount flags.
	Options  []string `json:"options,omitempty"`
	ReadOnly bool     `json:"readOnly"`
	Shallow  *shallow `json:"shallow,omitempty"`
	// CephUser is the Ceph user the mount authenticated as.
	CephUser string `json:"cephUser"`
	// WorkDir is the volume's private directory under the state directory.
	WorkDir string   `json:"workDir"`
	Targets []target `json:"targets,omitempty"`
}

// shallow describes a shallow (snapshot-backed, read-only) volume.
type shallow struct {
	SnapshotName string `json:"snapshotName"`
	// SnapshotDir is the snapshot's directory relative to the staging path:
	// .snap/<snapshot>/<uuid>, or .snap/<snapshot> for a pre-provisioned root path.
	SnapshotDir string `json:"snapshotDir"`
}

// target is a path the volume is published at.
type target struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly"`
}

const (
	recordVersion = 1
	// stateMounting: staging began; the mount may or may not exist.
	stateMounting = "mounting"
	// stateStaged: mounted at the staging path (it may have broken since).
	stateStaged = "staged"
)

// readRecord returns the record of a staging path as the file has it, or nil when there is
// none. The node works with loadRecord's answer.
func readRecord(stagingPath string) (*record, error) {
	return nodestate.ReadRecord[record](stagingPath, recordVersion)
}

// loadRecord returns the record of a staging path, or nil when there is none, with its work
// directory derived from the volume ID whatever the file says. The file lives next to the
// staging path, outside the state directory, and the work directory is where the node removes
// files recursively, writes the recovery key and points ceph-fuse's socket and log: never a
// path read back from a file. (The field is still written, for people and older versions.)
func (s *Server) loadRecord(stagingPath string) (*record, error) {
	r, err := readRecord(stagingPath)
	if err != nil || r == nil {
		return r, err
	}
	if dir := s.workDir(r.VolumeID); r.WorkDir != dir {
		klog.InfoS("Staging record names another work directory; using the one of its volume", "record", nodestate.RecordPath(stagingPath),
			"recorded", r.WorkDir, "workDir", dir)
		r.WorkDir = dir
	}
	return r, nil
}

// write replaces the record atomically (temporary file, fsync, rename, fsync of the
// directory): a crash leaves the old record or the new one, never a torn file.
func (r *record) write() error {
	r.Version = recordVersion
	return nodestate.WriteRecord(r.StagingPath, r)
}

func (r *record) remove() error { return nodestate.RemoveRecord(r.StagingPath) }

// source is what publishing binds: the staging path, or the snapshot directory in it.
func (r *record) source() string {
	if r.Shallow != nil {
		return filepath.Join(r.StagingPath, r.Shallow.SnapshotDir)
	}
	return r.StagingPath
}

// addTarget records a publish target; it reports whether the record changed.
func (r *record) addTarget(path string, readOnly bool) bool {
	t := target{Path: path, ReadOnly: readOnly}
	i := slices.IndexFunc(r.Targets, func(t target) bool { return t.Path == path })
	if i >= 0 {
		changed := r.Targets[i] != t
		r.Targets[i] = t
		return changed
	}
	r.Targets = append(r.Targets, t)
	return true
}

// removeTarget forgets a publish target; it reports whether the record changed.
func (r *record) removeTarget(path string) bool {
	n := len(r.Targets)
	r.Targets = slices.DeleteFunc(r.Targets, func(t target) bool { return t.Path == path })
	return len(r.Targets) != n
}

func (r *record) hasTarget(path string) bool {
	return slices.ContainsFunc(r.Targets, func(t target) bool { return t.Path == path })
}

// conflict explains why a stage request does not match what is staged, or returns "".
func (r *record) conflict(req stageRequest, options []string) string {
	v := req.vol
	switch {
	case r.ClusterID != v.ClusterID || r.FSName != v.FSName || r.RootPath != v.RootPath:
		return fmt.Sprintf("it holds %s:%s of cluster %s", r.FSName, r.RootPath, r.ClusterID)
	case (r.Shallow != nil) != v.Shallow || r.Shallow != nil && r.Shallow.SnapshotName != v.SnapshotName:
		if r.Shallow != nil {
			return fmt.Sprintf("it is a shallow volume of snapshot %q", r.Shallow.SnapshotName)
		}
		return "it is not a shallow volume"
	case v.Mounter != "" && v.Mounter != r.Mounter:
		return fmt.Sprintf("it is mounted with mounter %s, not %s", r.Mounter, v.Mounter)
	case !sameItems(r.Options, options):
		return fmt.Sprintf("it is mounted with options %q", strings.Join(r.Options, ","))
	case r.ReadOnly != (req.access.readOnly || v.Shallow):
		return fmt.Sprintf("it is mounted %s", rw(r.ReadOnly))
	}
	return ""
}

func sameItems(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func rw(readOnly bool) string {
	if readOnly {
		return "read-only"
	}
	return "read-write"
}

// workDir is the volume's directory under the state directory; the admin socket path in it
// must stay within a unix socket's 107 bytes (see newServer).
func (s *Server) workDir(volumeID string) string { return nodestate.WorkDir(s.opts.StateDir, volumeID) }

func (s *Server) writeIndex(r *record) error { return nodestate.WriteIndex(r.WorkDir, r.StagingPath) }

// indexedRecord follows a work directory's index to its record; nil when either is gone or the
// record belongs to another volume (whose work directory is another one).
func (s *Server) indexedRecord(workDir string) (*record, error) {
	stagingPath, ok, err := nodestate.IndexedStagingPath(workDir)
	if err != nil || !ok {
		return nil, err
	}
	r, err := s.loadRecord(stagingPath)
	if err != nil || r == nil || r.WorkDir != filepath.Clean(workDir) {
		return nil, err
	}
	return r, nil
}

// findRecord returns the record of a volume: at stagingPath when given, else through the
// volume's index. It returns nil when the volume is not staged on this node.
func (s *Server) findRecord(volumeID, stagingPath string) (*record, error) {
	var r *record
	var err error
	if stagingPath != "" {
		r, err = s.loadRecord(stagingPath)
	} else {
		r, err = s.indexedRecord(s.workDir(volumeID))
	}
	if err != nil || r == nil || r.VolumeID != volumeID {
		return nil, err
	}
	return r, nil
}
