package snapmeta

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"github.com/monoceph/monoceph/internal/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"
)

// TLSServer serves the Kubernetes-facing API on a TCP address with TLS, through the same
// interceptors as the CSI socket (request IDs, logging with security_token redacted, metrics,
// panic recovery).
type TLSServer struct {
	*grpc.Server
	lis net.Listener
}

// NewTLSServer listens on addr with the key pair in certFile and keyFile, read again when the
// files change (cert-manager renews them in place), and serves ks within its limits: streams
// cut at the engine's MaxStreamDuration (DeadlineOptions), silent connections pinged and
// closed when the ping goes unanswered, and connections recycled after MaxConnectionAge.
func NewTLSServer(addr, certFile, keyFile string, ks *KubeServer, m *server.Metrics) (*TLSServer, error) {
	certs := &certFiles{cert: certFile, key: keyFile}
	if _, err := certs.get(nil); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	l, maxStream := ks.limits, ks.engine.opts.MaxStreamDuration
	kp := keepalive.ServerParameters{Time: l.KeepaliveTime, Timeout: l.KeepaliveTimeout, MaxConnectionAge: l.MaxConnectionAge}
	if maxStream > 0 {
		// after GOAWAY, a stream that began just before may still run its full course
		kp.MaxConnectionAgeGrace = maxStream + l.KeepaliveTimeout
	}
	opts := append([]grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get})),
		grpc.ChainUnaryInterceptor(server.UnaryInterceptor(m)),
		grpc.ChainStreamInterceptor(server.StreamInterceptor(m)),
		grpc.KeepaliveParams(kp),
		// clients may ping as often as every 10 s, also between streams, without being told
		// to go away for it
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}, DeadlineOptions(maxStream)...)
	g := grpc.NewServer(opts...)
	api.RegisterSnapshotMetadataServer(g, ks)
	return &TLSServer{Server: g, lis: lis}, nil
}

// Addr is the bound address (useful with port 0).
func (s *TLSServer) Addr() string { return s.lis.Addr().String() }

// Serve blocks until the server stops.
func (s *TLSServer) Serve() error {
	if err := s.Server.Serve(s.lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Shutdown lets streams finish for up to grace, then cuts them.
func (s *TLSServer) Shutdown(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	stopped := make(chan struct{})
	go func() { s.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.Stop()
		<-stopped
	}
}

// certFiles loads a key pair and loads it again when either file's modification time changes.
type certFiles struct {
	cert, key string

	mu      sync.Mutex
	loaded  *tls.Certificate
	modTime [2]time.Time
}

func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var mt [2]time.Time
	for i, f := range []string{c.cert, c.key} {
		fi, err := os.Stat(f)
		if err != nil {
			return c.stale(fmt.Errorf("TLS key pair: %w", err))
		}
		mt[i] = fi.ModTime()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil && mt == c.modTime {
		return c.loaded, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		if c.loaded != nil { // a renewal half written: keep serving the old pair
			klog.ErrorS(err, "Reloading the TLS key pair failed, keeping the previous one", "cert", c.cert)
			return c.loaded, nil
		}
		return nil, fmt.Errorf("TLS key pair %s, %s: %w", c.cert, c.key, err)
	}
	c.loaded, c.modTime = &pair, mt
	return c.loaded, nil
}

func (c *certFiles) stale(err error) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded != nil {
		return c.loaded, nil
	}
	return nil, err
}
