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
