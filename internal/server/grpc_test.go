package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type slow struct {
	csi.UnimplementedControllerServer
	started chan struct{}
}

func (s slow) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	close(s.started)
	time.Sleep(300 * time.Millisecond)
	return &csi.ControllerGetCapabilitiesResponse{}, nil
}

func TestShutdownLetsInFlightRPCsFinish(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "csi.sock")
	g, err := NewGRPC(sock, NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	s := slow{started: make(chan struct{})}
	csi.RegisterControllerServer(g.Server, s)
	served := make(chan error, 1)
	go func() { served <- g.Serve() }()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rpc := make(chan error, 1)
	go func() {
		_, err := csi.NewControllerClient(conn).ControllerGetCapabilities(context.Background(), &csi.ControllerGetCapabilitiesRequest{})
		rpc <- err
	}()
	<-s.started
	g.Shutdown(5 * time.Second)
	if err := <-rpc; err != nil {
		t.Fatalf("in-flight RPC cut by graceful shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket not removed: %v", err)
	}
}
