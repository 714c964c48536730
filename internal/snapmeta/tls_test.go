package snapmeta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/monoceph/monoceph/internal/kubetest"
	"github.com/monoceph/monoceph/internal/server"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
)

// refuseAll authenticates nobody: the connection tests need no stream to succeed.
type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, string) (authnv1.UserInfo, error) {
	return authnv1.UserInfo{}, status.Error(codes.Unauthenticated, "nobody")
}
func (refuseAll) Authorize(context.Context, authnv1.UserInfo, string) error { return nil }
func (refuseAll) Snapshot(context.Context, string, string) (string, map[string]string, error) {
	return "", nil, nil
}

// keyPairFiles writes a key pair ca issues for name into PEM files and returns their paths.
func keyPairFiles(t testing.TB, ca *kubetest.CA, name string) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := ca.Issue(t, name)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// startTLS serves the Kubernetes-facing API with limits l and returns its address and CA.
func startTLS(t *testing.T, l Limits) (string, *x509.CertPool) {
	t.Helper()
	ca := kubetest.NewCA(t)
	certFile, keyFile := keyPairFiles(t, ca, "snapshot-metadata")
	srv, err := NewTLSServer("127.0.0.1:0", certFile, keyFile,
		NewKubeServer(NewEngine(Options{MaxStreamDuration: 2 * time.Second}), refuseAll{}, l), server.NewMetrics(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	return srv.Addr(), pool
}

// closedWithin reports whether the server closes conn within d; conn's peer never reads or
// writes before, as a client that vanished without a FIN or stopped reading its socket.
func closedWithin(conn net.Conn, d time.Duration) bool {
	time.Sleep(d)
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	_, err := io.Copy(io.Discard, conn) // what the server sent meanwhile, then EOF or a reset
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func TestConnectionsAreBounded(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		check  func(t *testing.T, addr string, roots *x509.CertPool) bool
		want   bool
	}{
		{
			name: "a silent peer is closed after keepalive time and timeout", want: true,
			limits: Limits{KeepaliveTime: time.Second, KeepaliveTimeout: time.Second},
			check:  silentPeer,
		},
		{
			name: "a silent peer stays within the keepalive time", want: false,
			limits: Limits{KeepaliveTime: time.Minute, KeepaliveTimeout: time.Second},
			check:  silentPeer,
		},
		{
			name: "a connection is sent away at its maximum age", want: true,
			limits: Limits{MaxConnectionAge: time.Second},
			check:  sentAway,
		},
		{
			name: "a younger connection stays", want: false,
			limits: Limits{MaxConnectionAge: time.Minute},
			check:  sentAway,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, roots := startTLS(t, tt.limits)
			if got := tt.check(t, addr, roots); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// silentPeer speaks TLS and the HTTP/2 preface, then nothing, and tells whether the server
// closed the connection within 4 s.
func silentPeer(t *testing.T, addr string, roots *x509.CertPool) bool {
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// the client preface and an empty SETTINGS frame
	if _, err := conn.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	return closedWithin(conn, 4*time.Second)
}

// sentAway makes one call on a connection and tells whether the server asked the client to
// go away (GOAWAY: the connection leaves READY) within 3 s.
func sentAway(t *testing.T, addr string, roots *x509.CertPool) bool {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := api.NewSnapshotMetadataClient(cc).GetMetadataAllocated(context.Background(), &api.GetMetadataAllocatedRequest{SecurityToken: "x"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("call: %v", err)
	}
	if s := cc.GetState(); s != connectivity.Ready {
		t.Fatalf("connection %v after a call", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return cc.WaitForStateChange(ctx, connectivity.Ready)
}
