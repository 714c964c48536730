package node

import (
	"errors"
	"fmt"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/nodereq"
	"github.com/monoceph/monoceph/internal/rbd/attach"
	"google.golang.org/grpc/status"
)

// TestReattachRetries: Recover retries every Ceph refusal a reattach meets, whatever its
// class (the CO never stages a staged volume again), and gives up only on the node's own final
// verdicts.
func TestReattachRetries(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		retry bool
	}{
		{"image gone", fmt.Errorf("open: %w", attach.ErrImageNotFound), false},
		{"connection lost", attach.ErrConnectionLost, false},
		{"mounter missing", &attach.UnavailableError{Mounter: "rbd-nbd", Missing: "rbd-nbd"}, false},
		{"no class", errors.New("boom"), true},
	}
	for _, c := range ceph.Classes {
		tests = append(tests, struct {
			name  string
			err   error
			retry bool
		}{"ceph " + c.Name, ceph.NewError("connect", c.Err, ""), true})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := reattachStatus("rbd/ns/img", tt.err)
			if got := nodereq.Retryable(st); got != tt.retry {
				t.Errorf("reattachStatus(%v) = %v: retried %v, want %v", tt.err, st, got, tt.retry)
			}
			if _, ok := status.FromError(st); !ok {
				t.Errorf("reattachStatus(%v) = %v, not a status", tt.err, st)
			}
		})
	}
}
