// Package cephcsicephfs runs csi-sanity against the CephFS driver under ceph-csi's driver name,
// StorageClass parameters and Secret keys.
package cephcsicephfs

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityCephCSICephFS(t *testing.T) { sanitytest.CephCSICephFS(t) }
