package rbd

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/cephcsiparam"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/rbd/volumecontext"
	"github.com/monoceph/monoceph/internal/volid"
)

// StorageClass parameter keys.
const (
	paramClusterID      = "clusterID"
	paramPool           = "pool"
	paramDataPool       = "dataPool"
	paramRadosNamespace = "radosNamespace"
	paramImageFeatures  = "imageFeatures"
	paramMounter        = "mounter"
	paramFsType         = "csi.storage.k8s.io/fstype"
	// paramTryOtherMounters (ceph-csi's key): when the node lacks the mounter, try the others
	paramTryOtherMounters = "tryOtherMounters"
	// paramEncrypted and paramKMSID (ceph-csi's keys): librbd's LUKS encryption, keys from a
	// KMS of the configuration (see encryption.go); paramEncryptionType is ceph-csi's choice
	// between block (what this is) and file (fscrypt) encryption
	paramEncrypted      = "encrypted"
	paramKMSID          = "encryptionKMSID"
	paramEncryptionType = "encryptionType"
)

// DefaultImageFeatures make changed-block queries cheap (object-map, fast-diff) and allow
// clones (layering) that can be flattened without their parent (deep-flatten).
var DefaultImageFeatures = []string{"layering", "exclusive-lock", "object-map", "fast-diff", "deep-flatten"}

// featureNeeds lists the features each feature depends on, so a bad combination is rejected
// with a reason instead of librbd's bare EINVAL.
var featureNeeds = map[string][]string{
	"object-map":     {"exclusive-lock"},
	"fast-diff":      {"object-map"},
	"journaling":     {"exclusive-lock"},
	"layering":       nil,
	"deep-flatten":   nil,
	"striping":       nil,
	"exclusive-lock": nil,
}

type volumeParams struct {
	ClusterID        string
	Pool             string
	DataPool         string
	Namespace        string
	nsSet            bool
	Features         []string
	Mounter          string
	TryOtherMounters bool
	// TopologyPools (topologyConstrainedPools) place the volume by its accessibility
	// requirements (see placeByTopology)
	TopologyPools []topologyPool
	// Encrypted volumes are formatted with librbd's LUKS2 and served only by the fuse
	// mounter; KMSID names their key's KMS ("": the default provider)
	Encrypted bool
	KMSID     string
	// encryptionType is checked only for an encrypted class: ceph-csi ignores it otherwise
	encryptionType string
	mounterSet     bool
}

func parseVolumeParams(p map[string]string) (volumeParams, error) {
	v := volumeParams{Mounter: volumecontext.DefaultMounter, Features: DefaultImageFeatures}
	for k, val := range p {
		switch k {
		case paramClusterID:
			v.ClusterID = val
		case paramPool:
			v.Pool = val
		case paramDataPool:
			v.DataPool = val
		case paramRadosNamespace:
			v.Namespace, v.nsSet = val, true
		case paramImageFeatures:
			fs, err := parseFeatures(val)
			if err != nil {
				return v, classparam.InvalidParam(k, "%v", err)
			}
			v.Features = fs
		case paramMounter:
			m, ok := volumecontext.CanonicalMounter(val)
			if !ok {
				return v, classparam.InvalidParam(k, "%q: want %s (or ceph-csi's %s), %s or %s", val, volumecontext.MounterKRBD,
					volumecontext.MounterCephCSIKRBD, volumecontext.MounterNBD, volumecontext.MounterFuse)
			}
			v.Mounter, v.mounterSet = m, true
		case paramEncrypted:
			b, err := strconv.ParseBool(val)
			if err != nil {
				return v, classparam.InvalidParam(k, "%q: want true or false", val)
			}
			v.Encrypted = b
		case paramKMSID:
			v.KMSID = val
		case paramEncryptionType:
			v.encryptionType = val
		case paramTryOtherMounters:
			b, err := strconv.ParseBool(val)
			if err != nil {
				return v, classparam.InvalidParam(k, "%q: want true or false", val)
			}
			v.TryOtherMounters = b
		case paramTopologyPools:
			pools, err := parseTopologyPools(val)
			if err != nil {
				return v, err
			}
			v.TopologyPools = pools
		case paramFsType:
			if val != "" && !supportedFsTypes[val] {
				return v, classparam.InvalidParam(k, "%q: want ext4 or xfs", val)
			}
		}
	}
	if err := cephcsiparam.Check(p, cephCSIRBDParams); err != nil {
		return v, err
	}
	known := []string{paramClusterID, paramPool, paramDataPool, paramRadosNamespace, paramImageFeatures, paramMounter, paramTryOtherMounters, paramTopologyPools,
		paramEncrypted, paramKMSID, paramEncryptionType}
	if err := classparam.UnknownParams(p, append(known, cephCSIRBDParams.Keys()...)...); err != nil {
		return v, err
	}
	if err := v.checkEncryption(); err != nil {
		return v, err
	}
	if v.ClusterID == "" {
		return v, classparam.InvalidParam(paramClusterID, "is missing")
	}
	if v.Pool == "" && len(v.TopologyPools) == 0 {
		return v, classparam.InvalidParam(paramPool, "is missing")
	}
	if v.nsSet && !volid.ValidNamespace(v.Namespace) {
		return v, classparam.InvalidParam(paramRadosNamespace, "%q: want at most %d characters of [A-Za-z0-9._-]", v.Namespace, volid.MaxNamespaceLen)
	}
	// the node's rules (volumecontext.Parse) for what reaches its rbd and rbd-fuse commands
	if err := classparam.NameParams(p, paramPool, paramDataPool, paramRadosNamespace); err != nil {
		return v, err
	}
	return v, nil
}

// checkEncryption puts an encrypted volume on the fuse mounter, the only one that reads through
// librbd, where the encryption is: krbd and rbd-nbd map the image's ciphertext.
func (v *volumeParams) checkEncryption() error {
	if !v.Encrypted {
		v.KMSID = "" // ceph-csi ignores it too, and encryptionType
		return nil
	}
	if v.encryptionType != "" && v.encryptionType != "block" {
		return classparam.InvalidParam(paramEncryptionType, "%q: only block (librbd's LUKS encryption of the whole image); file encryption (fscrypt) is not supported", v.encryptionType)
	}
	if v.mounterSet && v.Mounter != volumecontext.MounterFuse {
		return classparam.InvalidParam(paramMounter, "%q: encrypted volumes use librbd's own encryption, which only the %s mounter (librbd in monoceph's FUSE server) has; %s would map the ciphertext",
			v.Mounter, volumecontext.MounterFuse, v.Mounter)
	}
	if v.TryOtherMounters {
		return classparam.InvalidParam(paramTryOtherMounters, "encrypted volumes need the %s mounter: falling back to krbd or rbd-nbd would map the ciphertext", volumecontext.MounterFuse)
	}
	v.Mounter = volumecontext.MounterFuse
	return nil
}

func parseFeatures(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" || seen[f] {
			continue
		}
		if _, ok := featureNeeds[f]; !ok {
			return nil, fmt.Errorf("unknown or unsupported image feature %q", f)
		}
		seen[f] = true
		out = append(out, f)
	}
	for _, f := range out {
		for _, need := range featureNeeds[f] {
			if !seen[need] {
				return nil, fmt.Errorf("image feature %q needs %q", f, need)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func featureBits(names []string) uint64 {
	return uint64(rbd.FeatureSetFromNames(names))
}

// cephCSIRBDParams are ceph-csi's RBD StorageClass keys beyond the ones monoceph shares with
// it: accepted where they agree with what monoceph does, refused (naming the feature) where they
// would ask for something monoceph does not do. See cephcsiparam.Check.
var cephCSIRBDParams = cephcsiparam.Keys{
	"imageFormat":      cephcsiparam.OnlyValue("2", "RBD image format 1"),
	"volumeNamePrefix": cephcsiparam.OnlyValue("csi-vol-", "custom image name prefixes"),
	"thickProvision":   cephcsiparam.NotTrue("thick provisioning"),
	// node options: log placement of rbd-nbd, which monoceph decides itself
	"cephLogDir":      cephcsiparam.Ignored,
	"cephLogStrategy": cephcsiparam.Ignored,
	"mapOptions":      cephcsiparam.Empty("custom krbd/rbd-nbd map options"),
	"unmapOptions":    cephcsiparam.Empty("custom krbd/rbd-nbd unmap options"),
	"mkfsOptions":     cephcsiparam.Empty("custom mkfs options"),
	"stripeUnit":      cephcsiparam.Refused("striping"),
	"stripeCount":     cephcsiparam.Refused("striping"),
	"objectSize":      cephcsiparam.Refused("custom object sizes"),
	// QoS of newer ceph-csi releases: limits scaled by the volume's size, which monoceph
	// lacks; its own QoS limits (same librbd overrides) are VolumeAttributesClass parameters
	"baseIops": refusedQoS, "maxIops": refusedQoS,
	"baseReadIops": refusedQoS, "maxReadIops": refusedQoS,
	"baseWriteIops": refusedQoS, "maxWriteIops": refusedQoS,
	"baseBps": refusedQoS, "maxBps": refusedQoS,
	"baseReadBps": refusedQoS, "maxReadBps": refusedQoS,
	"baseWriteBps": refusedQoS, "maxWriteBps": refusedQoS,
	"iopsPerGiB": refusedQoS, "readIopsPerGiB": refusedQoS,
	"writeIopsPerGiB": refusedQoS, "bpsPerGiB": refusedQoS,
	"readBpsPerGiB": refusedQoS, "writeBpsPerGiB": refusedQoS,
	"baseVolSizeBytes": refusedQoS,
}

// refusedQoS: ceph-csi's QoS keys. A volume that has limits keeps them (they are the librbd
// overrides monoceph's own QoS parameters write).
var refusedQoS = cephcsiparam.Refused("ceph-csi's size-scaled QoS (monoceph's: qosIopsLimit and the like, in a VolumeAttributesClass)")
