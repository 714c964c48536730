package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"google.golang.org/grpc/codes"
)

// TestErrorCode: the node's own failures have their codes, every Ceph class answers the code
// of the one table (ceph.Classes), as the CephFS node's and the controllers' do.
func TestErrorCode(t *testing.T) {
	tests := []struct {
		err  error
		want codes.Code
	}{
		{&attach.UnavailableError{Mounter: "rbd-nbd", Missing: "rbd-nbd"}, codes.FailedPrecondition},
		{fmt.Errorf("map: %w", attach.ErrImageNotFound), codes.NotFound},
		{attach.ErrConnectionLost, codes.FailedPrecondition},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{context.Canceled, codes.Canceled},
		{errors.New("boom"), codes.Internal},
	}
	for _, c := range ceph.Classes {
		tests = append(tests, struct {
			err  error
			want codes.Code
		}{ceph.NewError("op", c.Err, ""), c.Code})
	}
	for _, tt := range tests {
		if got := errorCode(tt.err); got != tt.want {
			t.Errorf("errorCode(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
