// Package mount runs csi-sanity against the RBD driver with encrypted, mounted volumes.
package mount

import (
	"testing"

	"github.com/monoceph/monoceph/e2e/sanity/sanitytest"
)

func TestSanityRBDEncryptedMount(t *testing.T) { sanitytest.RBDEncrypted(t, "mount") }
