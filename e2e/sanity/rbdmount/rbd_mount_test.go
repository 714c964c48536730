// Package rbdmount runs csi-sanity against the RBD driver with filesystem volumes.
package rbdmount

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityRBDMount(t *testing.T) { sanitytest.RBD(t, "mount") }
