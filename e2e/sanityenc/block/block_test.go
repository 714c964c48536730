// Package block runs csi-sanity against the RBD driver with encrypted raw block volumes.
package block

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityRBDEncryptedBlock(t *testing.T) { sanitytest.RBDEncrypted(t, "block") }
