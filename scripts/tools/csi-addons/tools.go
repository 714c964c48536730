//go:build tools

// Package tools pins the csi-addons command-line client (cmd/csi-addons), which the fencing
// tests drive against the driver's csi-addons socket, outside the driver's own go.mod.
package tools

import _ "github.com/csi-addons/kubernetes-csi-addons/cmd/csi-addons"
