// Package cephfs runs csi-sanity against the CephFS driver.
package cephfs

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityCephFS(t *testing.T) { sanitytest.CephFS(t) }
