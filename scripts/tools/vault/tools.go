//go:build tools

// Package tools pins HashiCorp Vault v1.14.2 (MPL-2.0, a release before the licence change; go.mod
// says why not a later 1.14), the real KMS the Vault provider tests run `vault server -dev` from;
// the Makefile builds it into bin/.
package tools

import _ "github.com/hashicorp/vault"
