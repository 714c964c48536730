// Package volumecontext is the contract between the CephFS controller and node services: the
// volume context keys CreateVolume sets and NodeStageVolume reads.
package volumecontext

import (
	"fmt"
	"path"
	"strings"
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

// Parse reads a volume context; a missing or bad key names itself in the error.
func Parse(ctx map[string]string) (Volume, error) {
	v := Volume{ClusterID: ctx[ClusterID], FSName: ctx[FSName], RootPath: ctx[RootPath], Mounter: ctx[Mounter],
		FuseMountOptions: ctx[FuseMountOptions], KernelMountOptions: ctx[KernelMountOptions],
		Shallow: ctx[Shallow] == "true", SnapshotName: ctx[SnapshotName]}
	for k, val := range map[string]string{ClusterID: v.ClusterID, FSName: v.FSName, RootPath: v.RootPath} {
		if val == "" {
			return Volume{}, fmt.Errorf("volume_context[%q] is missing", k)
		}
	}
	if !strings.HasPrefix(v.RootPath, "/") || path.Clean(v.RootPath) != v.RootPath || strings.Contains(v.RootPath, "/.snap") {
		return Volume{}, fmt.Errorf("volume_context[%q] = %q: want a clean absolute path", RootPath, v.RootPath)
	}
	if v.Mounter != "" && v.Mounter != MounterFuse && v.Mounter != MounterKernel {
		return Volume{}, fmt.Errorf("volume_context[%q] = %q: want %s or %s", Mounter, v.Mounter, MounterFuse, MounterKernel)
	}
	if ctx[Shallow] != "" && ctx[Shallow] != "true" && ctx[Shallow] != "false" {
		return Volume{}, fmt.Errorf("volume_context[%q] = %q: want true or false", Shallow, ctx[Shallow])
	}
	if v.Shallow && (v.SnapshotName == "" || strings.ContainsAny(v.SnapshotName, "/\x00")) {
		return Volume{}, fmt.Errorf("volume_context[%q] = %q: a shallow volume needs a snapshot name", SnapshotName, v.SnapshotName)
	}
	return v, nil
}
