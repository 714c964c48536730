package cephfs

import (
	"strconv"
	"strings"

	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/cephcsiparam"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/classparam"
)

// StorageClass parameter keys.
const (
	paramClusterID          = "clusterID"
	paramFSName             = "fsName"
	paramSubvolumeGroup     = "subvolumeGroup"
	paramPool               = "pool"
	paramMounter            = "mounter"
	paramKernelMountOptions = "kernelMountOptions"
	paramFuseMountOptions   = "fuseMountOptions"
	paramBackingSnapshot    = "backingSnapshot"
)

// maxGroupLen bounds subvolume group names as the cluster map does.
const maxGroupLen = 64

type volumeParams struct {
	ClusterID       string
	FSName          string
	Group           string
	Pool            string
	Mounter         string
	KernelOptions   string
	FuseOptions     string
	BackingSnapshot bool // shallow volumes from snapshots when read-only (default true)
}

func parseVolumeParams(p map[string]string, cl func(string) (v1.Cluster, error)) (volumeParams, error) {
	if err := cephcsiparam.Check(p, cephCSIFSParams); err != nil {
		return volumeParams{}, err
	}
	known := []string{paramClusterID, paramFSName, paramSubvolumeGroup, paramPool, paramMounter,
		paramKernelMountOptions, paramFuseMountOptions, paramBackingSnapshot}
	if err := classparam.UnknownParams(p, append(known, cephCSIFSParams.Keys()...)...); err != nil {
		return volumeParams{}, err
	}
	v := volumeParams{ClusterID: p[paramClusterID], FSName: p[paramFSName], Group: p[paramSubvolumeGroup], Pool: p[paramPool],
		Mounter: p[paramMounter], KernelOptions: p[paramKernelMountOptions], FuseOptions: p[paramFuseMountOptions], BackingSnapshot: true}
	switch {
	case v.ClusterID == "":
		return v, classparam.InvalidParam(paramClusterID, "is missing")
	case v.FSName == "":
		return v, classparam.InvalidParam(paramFSName, "is missing")
	case len(v.Group) > maxGroupLen:
		return v, classparam.InvalidParam(paramSubvolumeGroup, "%q: want at most %d characters", v.Group, maxGroupLen)
	case v.Mounter != "" && v.Mounter != volumecontext.MounterFuse && v.Mounter != volumecontext.MounterKernel:
		return v, classparam.InvalidParam(paramMounter, "%q: want fuse or kernel", v.Mounter)
	case strings.ContainsAny(v.KernelOptions, " \n"):
		return v, classparam.InvalidParam(paramKernelMountOptions, "must be one comma-separated list without spaces")
	}
	// the node's rules (volumecontext.Parse) for the filesystem and the subvolume path
	if err := classparam.NameParams(p, paramFSName, paramPool, paramSubvolumeGroup); err != nil {
		return v, err
	}
	if s, ok := p[paramBackingSnapshot]; ok {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return v, classparam.InvalidParam(paramBackingSnapshot, "%q: want true or false", s)
		}
		v.BackingSnapshot = b
	}
	cluster, err := cl(v.ClusterID)
	if err != nil {
		return v, err
	}
	if v.Group == "" {
		v.Group = cluster.SubvolumeGroupOrDefault()
	}
	return v, nil
}

// cephCSIFSParams are ceph-csi's CephFS StorageClass keys beyond the ones monoceph shares with
// it (see cephcsiparam.Check).
var cephCSIFSParams = cephcsiparam.Keys{
	"volumeNamePrefix": cephcsiparam.OnlyValue("csi-vol-", "custom subvolume name prefixes"),
	"encrypted":        cephcsiparam.NotTrue("encryption of CephFS volumes (ceph-fuse has no fscrypt; encrypted volumes are RBD's, see parameters[\"encrypted\"] of an RBD class)"),
	"encryptionKMSID":  cephcsiparam.Ignored, // only read with encrypted: "true"
}
