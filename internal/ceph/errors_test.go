package ceph

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ceph/go-ceph/rados"
	"google.golang.org/grpc/codes"
)

type fakeErrno int

func (e fakeErrno) Error() string  { return fmt.Sprintf("errno %d", int(e)) }
func (e fakeErrno) ErrorCode() int { return int(e) }

func TestWrapClassifies(t *testing.T) {
	tests := []struct {
		err  error
		kind error
	}{
		{rados.ErrNotFound, ErrNotFound},
		{fakeErrno(-17), ErrExists},
		{fakeErrno(-16), ErrBusy},
		{fakeErrno(-39), ErrNotEmpty},
		{fakeErrno(-13), ErrPermission},
		{fakeErrno(-110), ErrTimeout},
		{fakeErrno(-108), ErrUnavailable},
		{fakeErrno(-34), ErrConflict},
		{fakeErrno(-75), ErrConflict},
		{fakeErrno(-125), ErrConflict},
		{fakeErrno(-28), ErrNoSpace},
		{fakeErrno(-95), ErrUnsupported},
		{context.DeadlineExceeded, ErrTimeout},
		{fmt.Errorf("outer: %w", fakeErrno(-2)), ErrNotFound},
	}
	for _, tt := range tests {
		err := Wrap("op", tt.err)
		if !errors.Is(err, tt.kind) {
			t.Errorf("Wrap(%v) = %v, not %v", tt.err, err, tt.kind)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("Wrap(%v) lost the cause", tt.err)
		}
	}
	if Wrap("op", nil) != nil {
		t.Error("Wrap(nil) != nil")
	}
	if err := Wrap("op", errors.New("plain")); errors.Is(err, ErrNotFound) || Errno(err) != 0 {
		t.Errorf("plain error classified: %v", err)
	}
	err := WrapDetail("osd pool get", fakeErrno(-2), "pool 'x' does not exist")
	if got := err.Error(); got != "osd pool get: errno -2: pool 'x' does not exist" {
		t.Errorf("message = %q", got)
	}
	if Errno(fmt.Errorf("ctx: %w", err)) != -2 {
		t.Error("Errno lost through wrapping")
	}
}

func TestWrapPositiveErrno(t *testing.T) {
	// rados_mgr_command answers a timeout as +110
	if err := Wrap("mgr command", fakeErrno(110)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wrap(+110) = %v, not ErrTimeout", err)
	}
}

func TestRetire(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{Wrap("op", fakeErrno(-108)), true}, // blocklisted
		{Wrap("op", fakeErrno(-110)), true}, // rados_osd_op_timeout / rados_mon_op_timeout
		{Wrap("op", fakeErrno(-2)), false},
		{Wrap("op", fakeErrno(-16)), false},
		{Wrap("op", context.DeadlineExceeded), false}, // the caller's deadline says nothing about the connection
		{nil, false},
	}
	for _, tt := range tests {
		if got := retire(tt.err); got != tt.want {
			t.Errorf("retire(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestClassCodes is the test over the one table of error classes: each class answers the CSI
// spec's code for it, through wrapping, and a class added without a code (or one this test
// does not know) fails here rather than answering whatever the zero code is.
func TestClassCodes(t *testing.T) {
	want := map[error]codes.Code{
		ErrNotFound:     codes.NotFound,
		ErrExists:       codes.AlreadyExists,
		ErrBusy:         codes.FailedPrecondition,
		ErrNotEmpty:     codes.FailedPrecondition,
		ErrAuth:         codes.Unauthenticated,
		ErrPermission:   codes.PermissionDenied,
		ErrUnavailable:  codes.Unavailable,
		ErrInvalid:      codes.InvalidArgument,
		ErrConflict:     codes.Aborted,
		ErrNoSpace:      codes.ResourceExhausted,
		ErrUnsupported:  codes.FailedPrecondition,
		ErrTimeout:      codes.DeadlineExceeded,
		ErrInconsistent: codes.Internal,
	}
	names := map[string]bool{}
	for _, c := range Classes {
		code, ok := want[c.Err]
		if !ok {
			t.Errorf("class %s (%v) is not in this test's table", c.Name, c.Err)
		}
		if c.Code != code {
			t.Errorf("class %s: code %v, want %v", c.Name, c.Code, code)
		}
		if got := CodeOf(fmt.Errorf("outer: %w", NewError("op", c.Err, ""))); got != code {
			t.Errorf("CodeOf(a wrapped %s error) = %v, want %v", c.Name, got, code)
		}
		if names[c.Name] {
			t.Errorf("class name %q twice: the holder's wire names must be unique", c.Name)
		}
		names[c.Name] = true
	}
	if len(Classes) != len(want) {
		t.Errorf("%d classes for %d codes in this test: a class is missing from ceph.Classes", len(Classes), len(want))
	}
	for _, tt := range []struct {
		err  error
		want codes.Code
	}{
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{Wrap("op", fakeErrno(-2)), codes.NotFound},
		{errors.New("boom"), codes.Internal},
		// an error of two classes (the holder's answers can be) takes the deadline first
		{errors.Join(NewError("op", ErrUnavailable, ""), context.DeadlineExceeded), codes.DeadlineExceeded},
	} {
		if got := CodeOf(tt.err); got != tt.want {
			t.Errorf("CodeOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
