// Package rbdblock runs csi-sanity against the RBD driver with raw block volumes.
package rbdblock

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
	"github.com/monoceph/monoceph/internal/driver"
)

func TestSanityRBDBlock(t *testing.T) {
	sanitytest.Run(t, sanitytest.Options{Type: driver.TypeRBD, AccessType: "block",
		Parameters: map[string]string{"pool": "rbd", "mounter": "fuse"}})
}
