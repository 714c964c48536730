// Package kubetest starts a real etcd and kube-apiserver (and optionally kube-controller-manager)
// from binaries built by make, for tests.
//
// The binaries are found through MONOCEPH_ETCD_BIN, MONOCEPH_KUBE_APISERVER_BIN and
// MONOCEPH_KUBE_CONTROLLER_MANAGER_BIN (make test sets them). When one is unset the test is
// skipped, unless MONOCEPH_INTEGRATION=1, where it fails: as with internal/cephtest, a run that
// is meant to be complete must not pass by skipping.
//
// The control plane authenticates an admin by static token and service accounts by their
// tokens, authorizes with RBAC, and has no kubelet and no cloud: pods are scheduled nowhere and
// stay Pending.
package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/kubelog"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options selects what Start runs besides etcd and kube-apiserver.
type Options struct {
	// ControllerManager also runs kube-controller-manager (MONOCEPH_KUBE_CONTROLLER_MANAGER_BIN),
	// for tests that need Deployments, ReplicaSets, garbage collection, namespace deletion or
	// default service accounts to behave as in a cluster.
	ControllerManager bool
}

// ControlPlane is a running control plane. Its processes stop when the test ends.
type ControlPlane struct {
	Admin      *rest.Config // system:masters by static token
	AdminToken string
	Host       string // https://127.0.0.1:<Port>
	Port       int
	CA         *CA // signed the apiserver's serving certificate
	Dir        string

	kc    kubernetes.Interface
	procs []*Process
}

const adminToken = "monoceph-test-admin"

func required() bool { return os.Getenv("MONOCEPH_INTEGRATION") == "1" }

// binary returns the path in env var v, or skips/fails the test as the package comment says.
func binary(t testing.TB, v, target string) string {
	t.Helper()
	p := os.Getenv(v)
	if p == "" {
		if required() {
			t.Fatalf("MONOCEPH_INTEGRATION=1 but %s is unset: run make test, or make bin/%s and point %s there", v, target, v)
		}
		t.Skipf("%s unset: `make bin/%s` builds it", v, target)
	}
	return p
}

// Start runs the control plane and returns once the apiserver is ready and, with
// ControllerManager, once the controllers reconcile.
func Start(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	etcdBin := binary(t, "MONOCEPH_ETCD_BIN", "etcd")
	apiserverBin := binary(t, "MONOCEPH_KUBE_APISERVER_BIN", "kube-apiserver")
	var kcmBin string
	if opts.ControllerManager {
		kcmBin = binary(t, "MONOCEPH_KUBE_CONTROLLER_MANAGER_BIN", "kube-controller-manager")
	}
	dir := t.TempDir()
	ca := NewCA(t)
	files := writePKI(t, dir, ca)

	clientPort, peerPort, apiPort := FreePort(t), FreePort(t), FreePort(t)
	cp := &ControlPlane{
		AdminToken: adminToken, Host: fmt.Sprintf("https://127.0.0.1:%d", apiPort), Port: apiPort, CA: ca, Dir: dir,
	}
	cp.Admin = &rest.Config{Host: cp.Host, BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM}, QPS: 100, Burst: 200}
	cp.kc = kubernetes.NewForConfigOrDie(cp.Admin)

	cp.start(t, "etcd", etcdBin, "--data-dir", filepath.Join(dir, "etcd"), "--unsafe-no-fsync", "--log-level", "error",
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort), "--advertise-client-urls", fmt.Sprintf("http://127.0.0.1:%d", clientPort),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort), "--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort))
	cp.startAPIServer(t, apiserverBin, clientPort, files)
	if !opts.ControllerManager {
		return cp
	}
	cp.startControllerManager(t, kcmBin, files)
	return cp
}

// pkiFiles are the control plane's certificates, keys and tokens, written to its directory.
type pkiFiles struct {
	ca, cert, key, tokens, saKey, saPub string
}

func writePKI(t testing.TB, dir string, ca *CA) pkiFiles {
	t.Helper()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certPEM, keyPEM := ca.Issue(t, "kube-apiserver")
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	saDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		t.Fatal(err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return pkiFiles{
		saKey:  write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER})),
		ca:     write("ca.crt", ca.CertPEM),
		cert:   write("apiserver.crt", certPEM),
		key:    write("apiserver.key", keyPEM),
		tokens: write("tokens.csv", []byte(adminToken+",admin,admin-uid,system:masters\n")),
		saPub:  write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})),
	}
}

// startAPIServer starts kube-apiserver on etcd's client port and waits until it is ready.
func (cp *ControlPlane) startAPIServer(t testing.TB, bin string, etcdPort int, f pkiFiles) {
	t.Helper()
	cp.start(t, "kube-apiserver", bin,
		"--etcd-servers", fmt.Sprintf("http://127.0.0.1:%d", etcdPort),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", fmt.Sprint(cp.Port),
		"--cert-dir", filepath.Join(cp.Dir, "certs"),
		"--tls-cert-file", f.cert, "--tls-private-key-file", f.key,
		"--token-auth-file", f.tokens,
		"--service-account-key-file", f.saPub,
		"--service-account-signing-key-file", f.saKey,
		"--service-account-issuer", "https://kubernetes.default.svc", "--api-audiences", "https://kubernetes.default.svc",
		"--authorization-mode", "RBAC", "--allow-privileged=true", "--service-cluster-ip-range", "10.96.0.0/24",
		"--enable-priority-and-fairness=false",
		// Without a kubelet nothing would use mounted tokens, and the admission plugin would
		// reject pods created before the service account controller made "default".
		"--disable-admission-plugins", "ServiceAccount")
	cp.wait(t, 60*time.Second, "kube-apiserver /readyz", func(ctx context.Context) error {
		body, err := cp.kc.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && string(body) != "ok" {
			err = fmt.Errorf("/readyz: %s", body)
		}
		return err
	})
}

// startControllerManager starts kube-controller-manager and waits until its controllers run.
func (cp *ControlPlane) startControllerManager(t testing.TB, bin string, f pkiFiles) {
	t.Helper()
	kubeconfig := filepath.Join(cp.Dir, "admin.kubeconfig")
	cp.writeKubeconfig(t, kubeconfig, adminToken)
	cp.start(t, "kube-controller-manager", bin,
		"--kubeconfig", kubeconfig,
		// Node, service load balancer and route controllers need nodes or a cloud; there are none.
		"--controllers", "*,-node-ipam-controller,-node-lifecycle-controller,-cloud-node-lifecycle-controller,-service-lb-controller,-node-route-controller",
		"--leader-elect=false", "--use-service-account-credentials=false",
		"--service-account-private-key-file", f.saKey, "--root-ca-file", f.ca,
		"--secure-port=0")
	// The service account controller creating "default" shows the informers synced and the
	// controllers run; without this wait the first Deployment of a test could race startup.
	cp.wait(t, 60*time.Second, `kube-controller-manager to create ServiceAccount default/default`, func(ctx context.Context) error {
		_, err := cp.kc.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

func (cp *ControlPlane) start(t testing.TB, name, bin string, args ...string) {
	t.Helper()
	p := StartProcess(t, name, filepath.Join(cp.Dir, name+".log"), exec.Command(bin, args...))
	cp.procs = append(cp.procs, p)
	t.Cleanup(func() {
		p.Stop(0)
		if t.Failed() {
			t.Logf("%s log (tail, full log in %s):\n%s", name, p.Log, p.Tail(3000))
		}
	})
}

// wait polls f until it succeeds, failing the test after timeout or as soon as a process of
// the control plane exits (which would otherwise only show as a timeout).
func (cp *ControlPlane) wait(t testing.TB, timeout time.Duration, what string, f func(context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		// The polls log at most client-go's capped verbosity: at -v=9 and above (a test that
		// captures everything at -v=10) client-go traces each dial, and a poll that ends while
		// its dial to a starting kube-apiserver is still running has that dial write its timing
		// as client-go reads it (a data race in client-go the race detector reported here).
		ctx, cancel := context.WithTimeout(kubelog.Context(context.Background()), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		for _, p := range cp.procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("waiting for %s: %s exited: %v (log follows)", what, p.Name, err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not done after %s: %v", what, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Kubeconfig writes a kubeconfig for the control plane that authenticates with token and
// returns its path.
func (cp *ControlPlane) Kubeconfig(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cp.writeKubeconfig(t, p, token)
	return p
}

func (cp *ControlPlane) writeKubeconfig(t testing.TB, path, token string) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cp.Host, CertificateAuthorityData: cp.CA.CertPEM}
	cfg.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest"}
	cfg.CurrentContext = "kubetest"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// Token issues a one-hour token of a service account through the TokenRequest API. Without
// audiences the token is for the apiserver itself.
func (cp *ControlPlane) Token(t testing.TB, namespace, serviceAccount string, audiences ...string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := cp.kc.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), serviceAccount, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for service account %s/%s: %v", namespace, serviceAccount, err)
	}
	return tr.Status.Token
}

// ModuleDir returns the directory of module as resolved by the go.mod governing dir (the
// current directory when dir is ""), so files read from it match the code compiled against it.
func ModuleDir(t testing.TB, dir, module string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		t.Fatalf("go list -m %s (in %q): %v", module, dir, err)
	}
	d := strings.TrimSpace(string(out))
	if d == "" {
		t.Fatalf("go list -m %s (in %q): module not downloaded", module, dir)
	}
	return d
}
