package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Shallow volumes.
//
// The mgr volumes module (subvolume v2) snapshots /volumes/<group>/<subvolume>, so a snapshot
// appears as /volumes/<group>/<subvolume>/.snap/<snapshot>/<uuid>. Staging mounts that parent
// rather than the subvolume's own directory: the parent, and the snapshot in it, stay when the
// subvolume is removed with --retain-snapshots, while <uuid> goes. In <uuid> itself the same
// snapshot shows as .snap/_<snapshot>_<inode of the parent>: CephFS names snapshots inherited
// from an ancestor that way.
//
// A root path the driver did not create (a pre-provisioned volume, whose credentials may only
// reach that directory) is mounted as it is; its snapshot is .snap/<snapshot>, or the one
// inherited one named _<snapshot>_<inode>.
//
// A root path that is a subvolume's base directory, /volumes/<group>/<subvolume>, comes from a
// snapshot whose subvolume's own path is no longer known: ceph-csi's shallow volumes give only
// that, and a subvolume removed with retained snapshots has none. The base directory is
// mounted, and the snapshot's one directory in .snap/<snapshot>/ is the subvolume's.

// subvolumePath is the shape of the root path of a subvolume the driver created.
var subvolumePath = regexp.MustCompile(`^/volumes/[^/]+/[^/]+/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// layout is what staging a volume mounts, and for a shallow volume where its snapshot is
// expected, relative to the staging path.
type layout struct {
	mountedPath string
	snapshotDir string // "" for a regular volume
	// inherited: the snapshot may show under CephFS's _<snapshot>_<inode> name
	inherited bool
	// findUUID: snapshotDir is .snap/<snapshot>, whose one directory is the subvolume's
	findUUID bool
}

func volumeLayout(v volumecontext.Volume) layout {
	if !v.Shallow {
		return layout{mountedPath: v.RootPath}
	}
	if volumecontext.SubvolumeBase(v.RootPath) {
		return layout{mountedPath: v.RootPath, snapshotDir: path.Join(".snap", v.SnapshotName), findUUID: true}
	}
	if subvolumePath.MatchString(v.RootPath) {
		return layout{
			mountedPath: path.Dir(v.RootPath),
			snapshotDir: path.Join(".snap", v.SnapshotName, path.Base(v.RootPath)),
		}
	}
	return layout{mountedPath: v.RootPath, snapshotDir: path.Join(".snap", v.SnapshotName), inherited: true}
}

// resolveSnapshotDir finds a shallow volume's snapshot under the mounted staging path. It
// runs at stage, so a volume whose snapshot is missing never reaches a pod: NOT_FOUND when the
// snapshot (or the subvolume's directory in it) does not exist, INVALID_ARGUMENT when the name
// matches more than one inherited snapshot.
func resolveSnapshotDir(stagingPath string, l layout, snapshot string) (string, error) {
	if l.findUUID {
		return onlyDirectory(stagingPath, l.snapshotDir)
	}
	if err := isDir(filepath.Join(stagingPath, l.snapshotDir)); err == nil {
		return l.snapshotDir, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", status.Errorf(codes.Internal, "snapshot directory: %v", err)
	}
	snapDir := filepath.Join(stagingPath, ".snap")
	if !l.inherited {
		// .snap/<snapshot>/<uuid>: say which part is missing
		if err := isDir(filepath.Join(snapDir, snapshot)); err != nil {
			return "", status.Errorf(codes.NotFound, "snapshot %q does not exist in %s", snapshot, snapDir)
		}
		return "", status.Errorf(codes.NotFound, "snapshot %q does not hold the subvolume directory %s: %s has %s",
			snapshot, path.Base(l.snapshotDir), filepath.Join(snapDir, snapshot), listDir(filepath.Join(snapDir, snapshot)))
	}
	entries, err := os.ReadDir(snapDir)
	if err != nil {
		return "", status.Errorf(codes.Internal, "listing snapshots: %v", err)
	}
	var found []string
	for _, e := range entries {
		if isInheritedName(e.Name(), snapshot) {
			found = append(found, e.Name())
		}
	}
	switch len(found) {
	case 0:
		return "", status.Errorf(codes.NotFound, "snapshot %q does not exist in %s", snapshot, snapDir)
	case 1:
		return path.Join(".snap", found[0]), nil
	}
	return "", status.Errorf(codes.InvalidArgument, "snapshot name %q is ambiguous in %s: it matches %s (snapshots of different ancestors)",
		snapshot, snapDir, strings.Join(found, ", "))
}

// onlyDirectory finds the subvolume's directory in a snapshot of its base directory: the one
// directory there (the volumes module keeps its metadata in a file beside it).
func onlyDirectory(stagingPath, snapDir string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(stagingPath, snapDir))
	if errors.Is(err, fs.ErrNotExist) {
		return "", status.Errorf(codes.NotFound, "snapshot %q does not exist in %s", path.Base(snapDir), filepath.Join(stagingPath, ".snap"))
	}
	if err != nil {
		return "", status.Errorf(codes.Internal, "listing snapshot %s: %v", snapDir, err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	if len(dirs) != 1 {
		return "", status.Errorf(codes.FailedPrecondition, "snapshot %s should hold one subvolume directory, it holds %d (%s)",
			snapDir, len(dirs), strings.Join(dirs, ", "))
	}
	return path.Join(snapDir, dirs[0]), nil
}

// isInheritedName reports whether name is _<snapshot>_<inode>.
func isInheritedName(name, snapshot string) bool {
	rest, ok := strings.CutPrefix(name, "_"+snapshot+"_")
	return ok && rest != "" && strings.Trim(rest, "0123456789") == ""
}

func isDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}

func listDir(p string) string {
	entries, err := os.ReadDir(p)
	if err != nil {
		return err.Error()
	}
	if len(entries) == 0 {
		return "nothing"
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return strings.Join(names, ", ")
}
