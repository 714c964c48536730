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
	// a deadline first: an error of several classes (the holder's answers can be) takes the
	// first that matches, the rest in ceph.Classes' order
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ceph.ErrTimeout):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	for _, c := range ceph.Classes {
		if code, ok := cephCodes[c.Err]; ok && errors.Is(err, c.Err) {
			return code
		}
	}
	return codes.Internal
}

// cephCodes is the code of each class of ceph.Classes (a test checks that every class has one).
var cephCodes = map[error]codes.Code{
	ceph.ErrNotFound:    codes.NotFound,
	ceph.ErrExists:      codes.AlreadyExists,
	ceph.ErrBusy:        codes.FailedPrecondition,
	ceph.ErrNotEmpty:    codes.FailedPrecondition,
	ceph.ErrAuth:        codes.Unauthenticated,
	ceph.ErrPermission:  codes.PermissionDenied,
	ceph.ErrUnavailable: codes.Unavailable,
	ceph.ErrInvalid:     codes.InvalidArgument,
	ceph.ErrConflict:    codes.Aborted,
	ceph.ErrNoSpace:     codes.ResourceExhausted,
	ceph.ErrUnsupported: codes.FailedPrecondition,
	ceph.ErrTimeout:     codes.DeadlineExceeded,
	// state the driver itself wrote is not what it expects: nothing a caller can change
	ceph.ErrInconsistent: codes.Internal,
}
