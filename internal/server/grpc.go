package server

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"github.com/monoceph/monoceph/internal/endpoint"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
)

// GRPC is a gRPC server on a unix socket.
type GRPC struct {
	*grpc.Server
	lis  net.Listener
	path string
}

// NewGRPC listens on the endpoint ep and builds a server with the standard interceptors. Register
// services on the embedded *grpc.Server, then call Serve.
func NewGRPC(ep string, m *Metrics, opts ...grpc.ServerOption) (*GRPC, error) {
	lis, path, err := endpoint.ListenUnix(ep)
	if err != nil {
		return nil, err
	}
	opts = append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(UnaryInterceptor(m)),
		grpc.ChainStreamInterceptor(StreamInterceptor(m)),
	}, opts...)
	return &GRPC{Server: grpc.NewServer(opts...), lis: lis, path: path}, nil
}

// Path is the socket file.
func (g *GRPC) Path() string { return g.path }

// Serve blocks until the server stops.
func (g *GRPC) Serve() error {
	if err := g.Server.Serve(g.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Shutdown lets in-flight RPCs finish for up to grace, then cuts the rest, and removes the
// socket file so the next start (or the registrar) does not find a dead one.
func (g *GRPC) Shutdown(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		klog.InfoS("Grace period over, cancelling RPCs still running", "socket", g.path, "grace", grace)
		g.Stop()
		<-stopped
	}
	if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.ErrorS(err, "Could not remove socket", "socket", g.path)
	}
}
