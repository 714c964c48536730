//go:build tools

// Package tools pins staticcheck outside the driver's own go.mod.
package tools

import _ "honnef.co/go/tools/cmd/staticcheck"
