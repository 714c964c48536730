package ceph

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"google.golang.org/grpc/codes"
)

// The driver's error vocabulary for Ceph failures. Ceph errnos are classified into these once,
// here; Classes gives each its gRPC status code.
var (
	ErrNotFound     = errors.New("not found")
	ErrExists       = errors.New("already exists")
	ErrBusy         = errors.New("in use")
	ErrNotEmpty     = errors.New("not empty")
	ErrPermission   = errors.New("permission denied")
	ErrAuth         = errors.New("authentication failed")
	ErrUnavailable  = errors.New("cluster unavailable")
	ErrTimeout      = errors.New("timed out")
	ErrInvalid      = errors.New("invalid argument")
	ErrConflict     = errors.New("concurrent update")
	ErrNoSpace      = errors.New("no space left")
	ErrUnsupported  = errors.New("not supported by this cluster")
	ErrInconsistent = errors.New("inconsistent state")
)

// Class is one of the error classes above with the name it travels under between processes
// (the mount holder's answers name the classes of an error, so that the node plugin classifies
// it as it would its own) and the gRPC code the servers answer it with.
type Class struct {
	Name string
	Err  error
	Code codes.Code
}

// Classes lists every class: the one table of the driver's Ceph errors, which the gRPC edge
// (CodeOf) and the holder's protocol are made from. The codes are the CSI spec's: a class says
// what a caller may do about it (retry, fix the request, fix the cluster).
var Classes = []Class{
	{"not-found", ErrNotFound, codes.NotFound},
	{"exists", ErrExists, codes.AlreadyExists},
	{"busy", ErrBusy, codes.FailedPrecondition},
	{"not-empty", ErrNotEmpty, codes.FailedPrecondition},
	{"auth", ErrAuth, codes.Unauthenticated},
	{"permission", ErrPermission, codes.PermissionDenied},
	{"unavailable", ErrUnavailable, codes.Unavailable},
	{"invalid", ErrInvalid, codes.InvalidArgument},
	{"conflict", ErrConflict, codes.Aborted},
	{"no-space", ErrNoSpace, codes.ResourceExhausted},
	{"unsupported", ErrUnsupported, codes.FailedPrecondition},
	{"timeout", ErrTimeout, codes.DeadlineExceeded},
	// state the driver itself wrote is not what it expects: nothing a caller can change
	{"inconsistent", ErrInconsistent, codes.Internal},
}

// CodeOf is the gRPC code of an error that is not a status: a deadline first (an error of
// several classes, as the holder's answers can be, takes the first that matches, the rest in
// Classes' order), then its class; an error of no class is INTERNAL.
func CodeOf(err error) codes.Code {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrTimeout):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	}
	for _, c := range Classes {
		if errors.Is(err, c.Err) {
			return c.Code
		}
	}
	return codes.Internal
}

// Error is a Ceph failure: what was attempted, the errno Ceph answered, the class it falls in
// and Ceph's own text (status output from mon/mgr commands, which carries the reason).
type Error struct {
	Op     string
	Errno  int // negative, as librados returns it; 0 when not from an errno
	Kind   error
	Detail string
	cause  error
}

func (e *Error) Error() string {
	msg := e.Op
	if e.cause != nil {
		msg += ": " + e.cause.Error()
	} else if e.Kind != nil {
		msg += ": " + e.Kind.Error()
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) and friends work.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }

// ErrorCode is the errno, for go-ceph's admin packages that inspect it by type assertion.
func (e *Error) ErrorCode() int { return e.Errno }

// Unwrap exposes the underlying library error.
func (e *Error) Unwrap() error { return e.cause }

type errorCoder interface{ ErrorCode() int }

// Is reports whether err falls in class kind (ErrNotFound, ErrBusy, …), whether it is a raw
// go-ceph error or one already wrapped.
func Is(err, kind error) bool { return err != nil && errors.Is(Wrap("", err), kind) }

// Wrap classifies err, a go-ceph error or a context error, as the result of op. nil stays nil.
func Wrap(op string, err error) error {
	return WrapDetail(op, err, "")
}

// WrapDetail is Wrap with Ceph's status text (from mon and mgr commands) attached.
func WrapDetail(op string, err error, detail string) error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return fmt.Errorf("%s: %w", op, err)
	}
	e := &Error{Op: op, Detail: detail, cause: err}
	var coder errorCoder
	switch {
	case errors.As(err, &coder):
		e.Errno = coder.ErrorCode()
		e.Kind = kindOf(e.Errno)
	case errors.Is(err, context.DeadlineExceeded):
		e.Kind = ErrTimeout
	case errors.Is(err, context.Canceled):
		e.Kind = context.Canceled
	}
	return e
}

// NewError builds an Error of a known class without a library error behind it.
func NewError(op string, kind error, detail string) error {
	return &Error{Op: op, Kind: kind, Detail: detail}
}

// Errno returns the Ceph errno behind err (negative), or 0.
func Errno(err error) int {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Errno
	}
	var coder errorCoder
	if errors.As(err, &coder) {
		return coder.ErrorCode()
	}
	return 0
}

func kindOf(errno int) error {
	if errno < 0 {
		errno = -errno // librados answers -errno, some command paths +errno
	}
	switch syscall.Errno(errno) {
	case syscall.ENOENT, syscall.ENXIO, syscall.ENODEV:
		return ErrNotFound
	case syscall.EEXIST:
		return ErrExists
	case syscall.EBUSY:
		return ErrBusy
	case syscall.ENOTEMPTY:
		return ErrNotEmpty
	case syscall.EPERM, syscall.EACCES:
		return ErrPermission
	case syscall.ETIMEDOUT:
		return ErrTimeout
	case syscall.ESHUTDOWN, syscall.ENOTCONN, syscall.ECONNREFUSED, syscall.EHOSTUNREACH, syscall.EAGAIN:
		return ErrUnavailable
	case syscall.EINVAL:
		return ErrInvalid
	case syscall.ERANGE, syscall.EOVERFLOW, syscall.ECANCELED:
		// a failed AssertVersion (ERANGE/EOVERFLOW) or omap/xattr compare (ECANCELED):
		// somebody else changed the object first
		return ErrConflict
	case syscall.ENOSPC, syscall.EDQUOT:
		return ErrNoSpace
	case syscall.EOPNOTSUPP, syscall.ENOSYS:
		return ErrUnsupported
	}
	return nil
}
