package server

import (
	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ToStatus converts a handler's error to a gRPC status once, at the server edge. Errors that
// already are statuses pass through; Ceph errors map by their class; anything else is INTERNAL
// with its text, so the operator sees Ceph's reason.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(CodeOf(err), err.Error())
}

// CodeOf is the gRPC code an error maps to: a status's own, else its Ceph class's
// (ceph.CodeOf).
func CodeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return ceph.CodeOf(err)
}
