// Package rbdmount runs csi-sanity against the RBD driver with filesystem volumes.
package rbdmount

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
	"github.com/monoceph/monoceph/internal/driver"
)

func TestSanityRBDMount(t *testing.T) {
	sanitytest.Run(t, sanitytest.Options{Type: driver.TypeRBD, AccessType: "mount",
		Parameters: map[string]string{"pool": "rbd", "mounter": "fuse"}})
}
