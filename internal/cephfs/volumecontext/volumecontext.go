// Package volumecontext is the contract between the CephFS controller and node services: the
// volume context keys CreateVolume sets and NodeStageVolume reads.
package volumecontext

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/monoceph/monoceph/internal/cephname"
)

// subvolumeBase is the base directory of a subvolume of the volumes module, the directory its
// snapshots are taken of: /volumes/<group>/<subvolume>.
var subvolumeBase = regexp.MustCompile(`^/volumes/[^/]+/[^/]+$`)

// SubvolumeBase reports whether p is a subvolume's base directory.
func SubvolumeBase(p string) bool { return subvolumeBase.MatchString(p) }

// Keys of the volume context of a CephFS volume.
const (
	ClusterID = "clusterID"
	FSName    = "fsName"
	// RootPath is the subvolume's path from the filesystem root
	// (/volumes/<group>/<subvolume>/<uuid>); for a shallow volume, the path of the subvolume
	// whose snapshot it exposes.
	RootPath = "rootPath"
	// Mounter is MounterFuse or MounterKernel.
	Mounter            = "mounter"
	FuseMountOptions   = "fuseMountOptions"
	KernelMountOptions = "kernelMountOptions"
	// Shallow is "true" for a read-only volume backed directly by a snapshot.
	Shallow = "shallow"
	// SnapshotName is the CephFS snapshot a shallow volume exposes:
	// <RootPath>/.snap/<SnapshotName>.
	SnapshotName = "snapshotName"

	// ceph-csi's keys, in the volume contexts of the PVs it provisioned: the subvolume's path
	// (for a shallow volume, the base directory of the subvolume whose snapshot it exposes,
	// with a trailing slash) and its name (for a shallow volume, a name no subvolume has).
	CephCSISubvolumePath = "subvolumePath"
	CephCSISubvolumeName = "subvolumeName"
	// Encrypted marks a volume ceph-csi encrypted (fscrypt); monoceph refuses to stage it.
	Encrypted = "encrypted"
)

// Mounters.
const (
	MounterFuse   = "fuse"
	MounterKernel = "kernel"
)

// Volume is what a node needs to mount a CephFS volume.
type Volume struct {
	ClusterID          string
	FSName             string
	RootPath           string
	Mounter            string // "" means: kernel where the node has it, else fuse
	FuseMountOptions   string
	KernelMountOptions string
	Shallow            bool
	SnapshotName       string
	// CephCSIShallow: a ceph-csi context whose path is a subvolume's base directory and whose
	// subvolume name is not that subvolume's: one of ceph-csi's shallow volumes, whose snapshot
	// only ceph-csi's journal names (the node resolves it before staging).
	CephCSIShallow bool
	Encrypted      bool
}

// Map renders the volume as a volume context.
func (v Volume) Map() map[string]string {
	m := map[string]string{ClusterID: v.ClusterID, FSName: v.FSName, RootPath: v.RootPath}
	for k, val := range map[string]string{Mounter: v.Mounter, FuseMountOptions: v.FuseMountOptions,
		KernelMountOptions: v.KernelMountOptions, SnapshotName: v.SnapshotName} {
		if val != "" {
			m[k] = val
		}
	}
	if v.Shallow {
		m[Shallow] = "true"
	}
	return m
}

// Parse reads a volume context; a missing or malformed key names itself in the error. The
// volume context is input the node must not trust (a pre-provisioned PersistentVolume carries
// whatever its author wrote): the filesystem name and the root path reach ceph-fuse's command
// line and the kernel client's mount source, and the snapshot name becomes a path under
// .snap, so each must be made of strict Ceph names (internal/cephname): no option, no second
// mount option, no way out of the directory it names. Mount options are the mounters' to check.
func Parse(ctx map[string]string) (Volume, error) {
	v := Volume{ClusterID: ctx[ClusterID], FSName: ctx[FSName], RootPath: ctx[RootPath], Mounter: ctx[Mounter],
		FuseMountOptions: ctx[FuseMountOptions], KernelMountOptions: ctx[KernelMountOptions],
		Shallow: ctx[Shallow] == "true", SnapshotName: ctx[SnapshotName]}
	if sp := ctx[CephCSISubvolumePath]; v.RootPath == "" && sp != "" {
		// ceph-csi's context, checked below as rootPath; its shallow volumes name their base
		// directory with a trailing slash
		if len(sp) > 1 {
			sp = strings.TrimSuffix(sp, "/")
		}
		v.RootPath = sp
		v.CephCSIShallow = SubvolumeBase(sp) && path.Base(sp) != ctx[CephCSISubvolumeName]
	}
	if e := ctx[Encrypted]; e != "" {
		b, err := strconv.ParseBool(e)
		if err != nil {
			return Volume{}, fmt.Errorf("volume_context[%q] = %q: want true or false", Encrypted, e)
		}
		v.Encrypted = b
	}
	for _, f := range []struct {
		key, value string
		check      func(string) error
	}{
		{ClusterID, v.ClusterID, cephname.Check},
		{FSName, v.FSName, cephname.Check},
		// the subvolume's path, /volumes/<group>/<subvolume>/<uuid>: never a .snap directory
		{RootPath, v.RootPath, cephname.CheckPath},
	} {
		if f.value == "" {
			return Volume{}, fmt.Errorf("volume_context[%q] is missing", f.key)
		}
		if err := f.check(f.value); err != nil {
			return Volume{}, fmt.Errorf("volume_context[%q] = %q: %v", f.key, f.value, err)
		}
	}
	if v.Mounter != "" && v.Mounter != MounterFuse && v.Mounter != MounterKernel {
		return Volume{}, fmt.Errorf("volume_context[%q] = %q: want %s or %s", Mounter, v.Mounter, MounterFuse, MounterKernel)
	}
	if ctx[Shallow] != "" && ctx[Shallow] != "true" && ctx[Shallow] != "false" {
		return Volume{}, fmt.Errorf("volume_context[%q] = %q: want true or false", Shallow, ctx[Shallow])
	}
	if v.Shallow && v.SnapshotName == "" {
		return Volume{}, fmt.Errorf("volume_context[%q] is missing: a shallow volume needs a snapshot name", SnapshotName)
	}
	if v.SnapshotName != "" {
		if err := cephname.Check(v.SnapshotName); err != nil {
			return Volume{}, fmt.Errorf("volume_context[%q] = %q: %v", SnapshotName, v.SnapshotName, err)
		}
	}
	return v, nil
}
