//go:build tools

// Package tools pins the linters `make lint` runs: staticcheck and goimports (golang.org/x/tools
// at the version staticcheck is built with).
package tools

import (
	_ "golang.org/x/tools/cmd/goimports"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
