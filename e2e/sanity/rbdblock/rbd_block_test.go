// Package rbdblock runs csi-sanity against the RBD driver with raw block volumes.
package rbdblock

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityRBDBlock(t *testing.T) { sanitytest.RBD(t, "block") }
