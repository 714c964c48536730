package snapmeta

import (
	"context"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// DeadlineOptions cut every SnapshotMetadata stream (CSI and Kubernetes-facing) of a server
// at d, at the transport: the stream's own context is cancelled, so a Send waiting on HTTP/2
// flow control for a client that stopped reading returns, and the handler with it. A deadline
// on the handler's context alone cannot do that: grpc-go's Send waits on the transport
// stream's context, which only a tap handle (an experimental grpc-go API) can replace. The
// stream ends with DEADLINE_EXCEEDED. d == 0 cuts nothing (nil options).
func DeadlineOptions(d time.Duration) []grpc.ServerOption {
	if d <= 0 {
		return nil
	}
	sd := streamDeadline{d: d}
	return []grpc.ServerOption{grpc.InTapHandle(sd.tap), grpc.ChainStreamInterceptor(sd.intercept)}
}

// streamServices are the services whose streams DeadlineOptions cut.
var streamServices = []string{"/" + csi.SnapshotMetadata_ServiceDesc.ServiceName + "/", "/" + api.SnapshotMetadata_ServiceDesc.ServiceName + "/"}

type streamDeadline struct{ d time.Duration }

type deadlineKey struct{}

// tap gives a stream a context of its own that intercept can cancel. It runs in the
// connection's reader goroutine: no timer here, only an allocation.
func (sd streamDeadline) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	for _, prefix := range streamServices {
		if strings.HasPrefix(info.FullMethodName, prefix) {
			ctx, cancel := context.WithCancelCause(ctx)
			return context.WithValue(ctx, deadlineKey{}, cancel), nil
		}
	}
	return ctx, nil
}

// intercept arms the stream's timer while its handler runs, and reports a cut stream as
// DEADLINE_EXCEEDED whatever the handler made of the cancelled context.
func (sd streamDeadline) intercept(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	cancel, ok := ss.Context().Value(deadlineKey{}).(context.CancelCauseFunc)
	if !ok {
		return handler(srv, ss)
	}
	cut := status.Errorf(codes.DeadlineExceeded, "the stream was cut after %v, the longest a stream may run; resume it with starting_offset", sd.d)
	timer := time.AfterFunc(sd.d, func() { cancel(cut) })
	defer timer.Stop()
	err := handler(srv, ss)
	if err != nil && context.Cause(ss.Context()) == cut {
		return cut
	}
	return err
}
