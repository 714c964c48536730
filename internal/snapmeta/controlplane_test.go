package snapmeta

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/cephtest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// controlPlane is a real etcd and kube-apiserver (built from scripts/tools by make, found
// through MONOCEPH_ETCD_BIN and MONOCEPH_KUBE_APISERVER_BIN), with token authentication for
// an admin, service account tokens, RBAC, and the snapshot CRDs installed.
type controlPlane struct {
	admin *rest.Config
	ca    *testCA
}

func kubeBinaries(t testing.TB) (apiserver, etcd string) {
	t.Helper()
	apiserver, etcd = os.Getenv("MONOCEPH_KUBE_APISERVER_BIN"), os.Getenv("MONOCEPH_ETCD_BIN")
	if apiserver == "" || etcd == "" {
		if cephtest.Required() {
			t.Fatal("MONOCEPH_INTEGRATION=1 but MONOCEPH_KUBE_APISERVER_BIN/MONOCEPH_ETCD_BIN are unset: run make test, or make bin/kube-apiserver bin/etcd and point them there")
		}
		t.Skip("MONOCEPH_KUBE_APISERVER_BIN/MONOCEPH_ETCD_BIN unset: `make bin/kube-apiserver bin/etcd` builds them")
	}
	return apiserver, etcd
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	apiserverBin, etcdBin := kubeBinaries(t)
	dir := t.TempDir()
	ca := newTestCA(t)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certPEM, keyPEM := ca.issue(t, "kube-apiserver")
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	saPubDER, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	const adminToken = "monoceph-test-admin"

	clientPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	start := func(name string, args ...string) {
		log, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(log.Name())
				t.Logf("%s log (tail):\n%s", name, tail(string(b), 3000))
			}
		})
	}
	start("etcd", etcdBin, "--data-dir", filepath.Join(dir, "etcd"), "--unsafe-no-fsync", "--log-level", "error",
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort))
	start("kube-apiserver", apiserverBin,
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(apiPort),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--tls-cert-file", write("apiserver.crt", certPEM), "--tls-private-key-file", write("apiserver.key", keyPEM),
		"--token-auth-file", write("tokens.csv", []byte(adminToken+",admin,admin-uid,system:masters\n")),
		"--service-account-key-file", write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})),
		"--service-account-signing-key-file", write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})),
		"--service-account-issuer", "https://kubernetes.default.svc", "--api-audiences", "https://kubernetes.default.svc",
		"--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.96.0.0/24",
		"--enable-priority-and-fairness=false", "--disable-admission-plugins", "ServiceAccount")

	cp := &controlPlane{ca: ca, admin: &rest.Config{
		Host: fmt.Sprintf("https://127.0.0.1:%d", apiPort), BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.certPEM}, QPS: 100, Burst: 200,
	}}
	kc := kubernetes.NewForConfigOrDie(cp.admin)
	deadline := time.Now().Add(60 * time.Second)
	for {
		body, err := kc.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err == nil && string(body) == "ok" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 60 s: %v %s", err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cp.installCRDs(t)
	return cp
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// installCRDs applies the VolumeSnapshot and SnapshotMetadataService CRDs that ship in the
// pinned modules (read from the module cache, so they match the client code) and waits until
// they serve.
func (cp *controlPlane) installCRDs(t testing.TB) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cp.admin)
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	var files []string
	for mod, names := range map[string][]string{
		"github.com/kubernetes-csi/external-snapshotter/client/v8": {
			"snapshot.storage.k8s.io_volumesnapshotclasses.yaml", "snapshot.storage.k8s.io_volumesnapshotcontents.yaml",
			"snapshot.storage.k8s.io_volumesnapshots.yaml"},
		"github.com/kubernetes-csi/external-snapshot-metadata/client": {"cbt.storage.k8s.io_snapshotmetadataservices.yaml"},
	} {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
		if err != nil {
			t.Fatalf("go list -m %s: %v", mod, err)
		}
		for _, n := range names {
			files = append(files, filepath.Join(strings.TrimSpace(string(out)), "config", "crd", n))
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := dyn.Resource(crdGVR).Create(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create CRD %s: %v", filepath.Base(f), err)
		}
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"},
		{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"},
		{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"},
		{Group: "cbt.storage.k8s.io", Version: "v1beta1", Resource: "snapshotmetadataservices"},
	} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := dyn.Resource(gvr).List(context.Background(), metav1.ListOptions{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v not served: %v", gvr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// testCA issues serving certificates for 127.0.0.1.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "monoceph test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

var serial = big.NewInt(1)

func (ca *testCA) issue(t testing.TB, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial = new(big.Int).Add(serial, big.NewInt(1))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	var c, k bytes.Buffer
	_ = pem.Encode(&c, &pem.Block{Type: "CERTIFICATE", Bytes: der})
	_ = pem.Encode(&k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	return c.Bytes(), k.Bytes()
}
