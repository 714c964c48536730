//go:build tools

// Package tools pins the csi-addons project's binaries outside the driver's own go.mod: the
// command-line client (cmd/csi-addons), which the fencing tests drive against the driver's
// csi-addons socket, and the controller manager (cmd/manager) and sidecar (sidecar/) the
// end-to-end tests deploy next to the driver.
package tools

import (
	_ "github.com/csi-addons/kubernetes-csi-addons/cmd/csi-addons"
	_ "github.com/csi-addons/kubernetes-csi-addons/cmd/manager"
	_ "github.com/csi-addons/kubernetes-csi-addons/sidecar"
)
