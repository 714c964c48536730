package server

import (
	"context"
	"errors"

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

// CodeOf is the gRPC code an error maps to.
func CodeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	for _, m := range codeMap {
		if errors.Is(err, m.err) {
			return m.code
		}
	}
	return codes.Internal
}

var codeMap = []struct {
	err  error
	code codes.Code
}{
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{ceph.ErrTimeout, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	{ceph.ErrNotFound, codes.NotFound},
	{ceph.ErrExists, codes.AlreadyExists},
	{ceph.ErrBusy, codes.FailedPrecondition},
	{ceph.ErrNotEmpty, codes.FailedPrecondition},
	{ceph.ErrAuth, codes.Unauthenticated},
	{ceph.ErrPermission, codes.PermissionDenied},
	{ceph.ErrUnavailable, codes.Unavailable},
	{ceph.ErrInvalid, codes.InvalidArgument},
	{ceph.ErrConflict, codes.Aborted},
	{ceph.ErrNoSpace, codes.ResourceExhausted},
	{ceph.ErrUnsupported, codes.FailedPrecondition},
}
