package driver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/external-snapshot-metadata/pkg/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestSnapshotMetadataRegistration checks that RBD controllers serve and advertise
// SnapshotMetadata on the CSI socket, with the stream deadline on it, and node-only processes
// do none of that.
func TestSnapshotMetadataRegistration(t *testing.T) {
	for _, tt := range []struct {
		mode      Mode
		typ       Type
		advertise bool
	}{
		{ModeController, TypeRBD, true},
		{ModeAll, TypeRBD, true},
		{ModeNode, TypeRBD, false},
		{ModeController, TypeCephFS, false},
	} {
		t.Run(string(tt.typ)+"-"+string(tt.mode), func(t *testing.T) {
			cfg := testConfig(t, tt.mode)
			cfg.Type, cfg.CSIAddonsEndpoint = tt.typ, ""
			cfg.SnapshotMetadata.MaxStreamDuration = time.Minute
			// where the streams are served, the CSI socket cuts them at the transport
			if cut := len(cfg.socketOptions()) > 0; cut != tt.advertise {
				t.Errorf("CSI socket cuts streams at their maximum duration: %v, want %v", cut, tt.advertise)
			}
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- d.Run(runCtx) }()
			defer func() { stop(); <-done }()

			cc, err := grpc.NewClient("unix://"+d.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			caps, err := csi.NewIdentityClient(cc).GetPluginCapabilities(ctx, &csi.GetPluginCapabilitiesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range caps.GetCapabilities() {
				if c.GetService().GetType() == csi.PluginCapability_Service_SNAPSHOT_METADATA_SERVICE {
					found = true
				}
			}
			if found != tt.advertise {
				t.Errorf("SNAPSHOT_METADATA_SERVICE advertised: %v, want %v (%v)", found, tt.advertise, caps.GetCapabilities())
			}
			st, err := csi.NewSnapshotMetadataClient(cc).GetMetadataAllocated(ctx, &csi.GetMetadataAllocatedRequest{})
			if err == nil {
				_, err = st.Recv()
			}
			want := codes.Unimplemented
			if tt.advertise {
				want = codes.InvalidArgument // served: the empty snapshot_id is refused
			}
			if status.Code(err) != want {
				t.Errorf("GetMetadataAllocated: %v, want %v", err, want)
			}
		})
	}
}

// TestSnapshotMetadataTLSListener starts a controller with the Kubernetes-facing API on TLS and
// checks that it serves there: a call without a token is refused as UNAUTHENTICATED before the
// API server (unreachable here) is asked anything.
func TestSnapshotMetadataTLSListener(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: x}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, ModeController)
	cfg.CSIAddonsEndpoint = ""
	cfg.SnapshotMetadata = SnapshotMetadataConfig{Address: "127.0.0.1:0", TLSCert: certFile, TLSKey: keyFile, Audience: "a", Kubeconfig: kubeconfig}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() { stop(); <-done }()

	cc, err := grpc.NewClient(d.snapTLS.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := api.NewSnapshotMetadataClient(cc).GetMetadataAllocated(ctx, &api.GetMetadataAllocatedRequest{Namespace: "ns", SnapshotName: "s"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("GetMetadataAllocated without a token: %v, want Unauthenticated", err)
	}
}

// selfSigned writes a throwaway key pair for 127.0.0.1.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
