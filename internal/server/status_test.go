package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	tests := []struct {
		err  error
		code codes.Code
	}{
		{status.Error(codes.OutOfRange, "x"), codes.OutOfRange},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{ceph.NewError("connect", ceph.ErrTimeout, ""), codes.DeadlineExceeded},
		{ceph.NewError("stat", ceph.ErrNotFound, ""), codes.NotFound},
		{ceph.NewError("create", ceph.ErrExists, ""), codes.AlreadyExists},
		{ceph.NewError("rm", ceph.ErrBusy, ""), codes.FailedPrecondition},
		{ceph.NewError("connect", ceph.ErrAuth, ""), codes.Unauthenticated},
		{ceph.NewError("op", ceph.ErrPermission, ""), codes.PermissionDenied},
		{ceph.NewError("op", ceph.ErrUnavailable, ""), codes.Unavailable},
		{ceph.NewError("op", ceph.ErrConflict, ""), codes.Aborted},
		{errors.New("boom"), codes.Internal},
	}
	for _, tt := range tests {
		got := ToStatus(tt.err)
		if status.Code(got) != tt.code {
			t.Errorf("ToStatus(%v) = %v, want %v", tt.err, status.Code(got), tt.code)
		}
		if s, _ := status.FromError(got); s.Message() == "" {
			t.Errorf("ToStatus(%v) lost the message", tt.err)
		}
	}
	if ToStatus(nil) != nil {
		t.Error("ToStatus(nil) != nil")
	}
}

// TestEveryCephClassHasACode: a class added to ceph.Classes without a code here would answer
// INTERNAL whatever it means.
func TestEveryCephClassHasACode(t *testing.T) {
	for _, c := range ceph.Classes {
		code, ok := cephCodes[c.Err]
		if !ok {
			t.Errorf("ceph class %s (%v) has no gRPC code", c.Name, c.Err)
		}
		if got := CodeOf(ceph.NewError("op", c.Err, "")); got != code {
			t.Errorf("CodeOf(a %s error) = %v, want %v", c.Name, got, code)
		}
	}
	if len(cephCodes) != len(ceph.Classes) {
		t.Errorf("%d codes for %d ceph classes: a code for a class ceph.Classes does not list", len(cephCodes), len(ceph.Classes))
	}
}
