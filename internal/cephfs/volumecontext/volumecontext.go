// Package volumecontext is the contract between the CephFS controller and node services: the
// volume context keys CreateVolume sets and NodeStageVolume reads.
package volumecontext

import (
	"fmt"

	"github.com/monoceph/monoceph/internal/cephname"
)

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
