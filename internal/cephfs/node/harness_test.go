package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/oplock"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeExec records commands and fails modprobe: the unit tests' node has no kernel CephFS.
type fakeExec struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeExec) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+strings.Join(args, " "))
	if name == "modprobe" {
		return nil, &hostexec.CommandError{Name: name, Args: args, ExitCode: 1, Output: "modprobe: FATAL: Module ceph not found"}
	}
	return nil, nil
}

// testClusterMap writes a one-cluster map and loads it.
func testClusterMap(t *testing.T) *clustermap.Store {
	t.Helper()
	p := filepath.Join(t.TempDir(), "clusters.json")
	if err := os.WriteFile(p, []byte(`[{"clusterID":"c1","monitors":["10.0.0.1:6789"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := clustermap.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newUnitServer is a server whose commands go nowhere and whose kernel lacks CephFS (or has it).
func newUnitServer(t *testing.T, kernelHasCeph bool) (*Server, *fakeExec) {
	t.Helper()
	x := &fakeExec{}
	fsList := filepath.Join(t.TempDir(), "filesystems")
	content := "nodev\tfuse\n"
	if kernelHasCeph {
		content += "nodev\tceph\n"
	}
	if err := os.WriteFile(fsList, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(Options{
		NodeID:   "node-1",
		StateDir: stateDir(t),
		Clusters: testClusterMap(t),
		Locks:    oplock.New(),
		Timeout:  10 * time.Second,
	}, x, mount.NewFuse(x, 5*time.Second), mount.NewKernelWith(x, fsList))
	if err != nil {
		t.Fatal(err)
	}
	return s, x
}

// stateDir is a short state directory: admin socket paths in it must fit in 107 bytes, which
// t.TempDir() under a long test name does not leave room for.
func stateDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "state")
}

// testKey is a well-formed cephx key: type 1 (AES), creation time, secret length 16, secret.
const testKey = "AQAAAAAAAAAAABAAMDEyMzQ1Njc4OWFiY2RlZg=="

func testSecrets() map[string]string {
	return map[string]string{ceph.SecretUserID: "csi-node", ceph.SecretUserKey: testKey}
}

func mountCapability(mode csi.VolumeCapability_AccessMode_Mode) *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

func testContext() map[string]string {
	return volumecontext.Volume{ClusterID: "c1", FSName: "myfs", RootPath: "/volumes/csi/sub/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"}.Map()
}

// wantCode fails unless err is a status with code and a message containing msg.
func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != code || !strings.Contains(s.Message(), msg) {
		t.Fatalf("got %v (%v), want %v containing %q", s.Code(), err, code, msg)
	}
}
