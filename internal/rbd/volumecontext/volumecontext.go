// Package volumecontext is the contract between the RBD controller and node services: the
// volume context keys CreateVolume sets and NodeStageVolume reads.
package volumecontext

import (
	"fmt"
	"strconv"

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
	// TryOtherMounters (ceph-csi's key) lets the node use another mounter when it lacks the
	// one asked for.
	TryOtherMounters = "tryOtherMounters"
	// Encrypted (ceph-csi's key) marks an encrypted volume: by ceph-csi (refused by monoceph's
	// node) or, with EncryptionEngine, by monoceph.
	Encrypted = "encrypted"
	// EncryptionKMSID (ceph-csi's key) names the KMS configuration entry of the volume's key.
	EncryptionKMSID = "encryptionKMSID"
	// EncryptionEngine is EngineLibrbd on volumes monoceph encrypted: librbd's own LUKS
	// encryption, loaded by the fuse mounter's server (ceph-csi's dm-crypt volumes lack it).
	EncryptionEngine = "encryptionEngine"
	EngineLibrbd     = "librbd"
)

// Mounters.
const (
	MounterKRBD = "krbd"
	MounterNBD  = "rbd-nbd"
	MounterFuse = "fuse"
)

// MounterCephCSIKRBD is ceph-csi's name for krbd, found in its classes and volume contexts.
const MounterCephCSIKRBD = "rbd"

// DefaultMounter is used when a StorageClass names none.
const DefaultMounter = MounterKRBD

// Mounters is every mounter, in the order tryOtherMounters falls back through them.
var Mounters = []string{MounterKRBD, MounterNBD, MounterFuse}

// ValidMounter reports whether m names a mounter.
func ValidMounter(m string) bool {
	_, ok := CanonicalMounter(m)
	return ok
}

// CanonicalMounter maps a mounter name, ceph-csi's included, to monoceph's.
func CanonicalMounter(m string) (string, bool) {
	switch m {
	case MounterKRBD, MounterCephCSIKRBD:
		return MounterKRBD, true
	case MounterNBD, MounterFuse:
		return m, true
	}
	return "", false
}

// Image is what a node needs to attach a volume.
type Image struct {
	ClusterID        string
	Pool             string
	Namespace        string
	Name             string
	Mounter          string
	TryOtherMounters bool
	// Encrypted: the volume is encrypted, by ceph-csi unless Librbd.
	Encrypted bool
	// Librbd: monoceph encrypted the volume with librbd (EncryptionEngine), and KMSID names
	// where its key comes from ("": the default provider).
	Librbd bool
	KMSID  string
}

// Map renders the image as a volume context.
func (i Image) Map() map[string]string {
	m := map[string]string{
		ClusterID: i.ClusterID, Pool: i.Pool, RadosNamespace: i.Namespace, ImageName: i.Name, Mounter: i.Mounter,
	}
	if i.TryOtherMounters {
		m[TryOtherMounters] = "true"
	}
	if i.Encrypted {
		m[Encrypted] = "true"
	}
	if i.Librbd {
		m[EncryptionEngine] = EngineLibrbd
	}
	if i.KMSID != "" {
		m[EncryptionKMSID] = i.KMSID
	}
	return m
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
	m, ok := CanonicalMounter(i.Mounter)
	if !ok {
		return Image{}, fmt.Errorf("volume_context[%q] = %q: want %s, %s or %s", Mounter, i.Mounter, MounterKRBD, MounterNBD, MounterFuse)
	}
	i.Mounter = m
	for key, dst := range map[string]*bool{TryOtherMounters: &i.TryOtherMounters, Encrypted: &i.Encrypted} {
		if v := ctx[key]; v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Image{}, fmt.Errorf("volume_context[%q] = %q: want true or false", key, v)
			}
			*dst = b
		}
	}
	i.KMSID = ctx[EncryptionKMSID]
	switch e := ctx[EncryptionEngine]; {
	case e == "":
	case e != EngineLibrbd:
		return Image{}, fmt.Errorf("volume_context[%q] = %q: want %s", EncryptionEngine, e, EngineLibrbd)
	case !i.Encrypted:
		return Image{}, fmt.Errorf("volume_context[%q] = %q needs volume_context[%q] = \"true\"", EncryptionEngine, e, Encrypted)
	case i.Mounter != MounterFuse || i.TryOtherMounters:
		return Image{}, fmt.Errorf("volume_context[%q] = %q: librbd's encryption needs the %s mounter, not %s (tryOtherMounters %v)", EncryptionEngine, e, MounterFuse, i.Mounter, i.TryOtherMounters)
	default:
		i.Librbd = true
	}
	return i, nil
}
