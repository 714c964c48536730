package snapmeta

import (
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCephErrorsKeepTheirText checks that a Ceph failure reaches the client with Ceph's reason.
func TestCephErrorsKeepTheirText(t *testing.T) {
	err := innerStatus(ceph.Wrap("diff x", status.Error(codes.NotFound, "snapshot y does not exist")))
	if s, _ := status.FromError(err); s.Code() != codes.NotFound || s.Message() != "snapshot y does not exist" {
		t.Errorf("innerStatus = %v", err)
	}
}
