//go:build tools

// Package tools pins grpcurl, the generic gRPC client `make run` uses to show the driver's
// sockets answering.
package tools

import _ "github.com/fullstorydev/grpcurl/cmd/grpcurl"
