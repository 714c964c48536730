// Package cephcsirbd runs csi-sanity against the RBD driver under ceph-csi's driver name and
// StorageClass parameters: a drop-in for ceph-csi passes the same suite.
package cephcsirbd

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityCephCSIRBD(t *testing.T) { sanitytest.CephCSIRBD(t, "mount") }
