// Package volumecontext is the contract between the RBD controller and node services: the
// volume context keys CreateVolume sets and NodeStageVolume reads.
package volumecontext

import (
	"fmt"

	"github.com/monoceph/monoceph/internal/cephname"
)

// Keys of the volume context of an RBD volume.
const (
	ClusterID      = "clusterID"
	Pool           = "pool"
	RadosNamespace = "radosNamespace"
	ImageName      = "imageName"
	// Mounter is how the node attaches the image: MounterKRBD, MounterNBD or MounterFuse.
	Mounter = "mounter"
)

// Mounters.
const (
	MounterKRBD = "krbd"
	MounterNBD  = "rbd-nbd"
	MounterFuse = "fuse"
)

// DefaultMounter is used when a StorageClass names none.
const DefaultMounter = MounterKRBD

// ValidMounter reports whether m names a mounter.
func ValidMounter(m string) bool {
	return m == MounterKRBD || m == MounterNBD || m == MounterFuse
}

// Image is what a node needs to attach a volume.
type Image struct {
	ClusterID string
	Pool      string
	Namespace string
	Name      string
	Mounter   string
}

// Map renders the image as a volume context.
func (i Image) Map() map[string]string {
	return map[string]string{
		ClusterID: i.ClusterID, Pool: i.Pool, RadosNamespace: i.Namespace, ImageName: i.Name, Mounter: i.Mounter,
	}
}

// Parse reads a volume context; a missing or malformed key names itself in the error. The
// volume context is input the node must not trust (a pre-provisioned PersistentVolume carries
// whatever its author wrote): pool, namespace and image reach rbd and rbd-fuse command lines,
// and the image name becomes a file name under rbd-fuse's mount point, so each must be a strict
// Ceph name (internal/cephname): no option, no second argument, no path.
func Parse(ctx map[string]string) (Image, error) {
	i := Image{ClusterID: ctx[ClusterID], Pool: ctx[Pool], Namespace: ctx[RadosNamespace], Name: ctx[ImageName], Mounter: ctx[Mounter]}
	for _, f := range []struct {
		key, value string
		optional   bool
	}{
		{ClusterID, i.ClusterID, false},
		{Pool, i.Pool, false},
		{RadosNamespace, i.Namespace, true},
		{ImageName, i.Name, false},
	} {
		if f.value == "" {
			if f.optional {
				continue
			}
			return Image{}, fmt.Errorf("volume_context[%q] is missing", f.key)
		}
		if err := cephname.Check(f.value); err != nil {
			return Image{}, fmt.Errorf("volume_context[%q] = %q: %v", f.key, f.value, err)
		}
	}
	if i.Mounter == "" {
		i.Mounter = DefaultMounter
	}
	if !ValidMounter(i.Mounter) {
		return Image{}, fmt.Errorf("volume_context[%q] = %q: want %s, %s or %s", Mounter, i.Mounter, MounterKRBD, MounterNBD, MounterFuse)
	}
	return i, nil
}
