package rbd

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cephUser creates a Ceph user with caps for the test and returns its CSI secrets.
func (e *env) cephUser(t *testing.T, name string, caps ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	entity := "client." + name
	out, err := ceph.MonCommand(ctx, e.conn, cephtest.ReadableKey(map[string]any{"prefix": "auth get-or-create", "entity": entity, "caps": caps}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := ceph.MonCommand(ctx, e.conn, map[string]any{"prefix": "auth del", "entity": entity}); err != nil {
			t.Errorf("auth del %s: %v", entity, err)
		}
	})
	var users []struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &users); err != nil || len(users) != 1 {
		t.Fatalf("auth get-or-create: %s: %v", out, err)
	}
	return map[string]string{ceph.SecretUserID: name, ceph.SecretUserKey: users[0].Key}
}

// TestGetCapacityAsTheStorageClassUser has two StorageClasses with users of their own: the
// admin, and a user that may connect but not read the cluster's df (a fencing user, whose
// connections the csi-addons FenceController keeps in the same pool). GetCapacity, which
// carries no secrets, must ask as each class's own user, whatever other connections the
// process holds, and say UNAVAILABLE for a class whose user it has not met.
func TestGetCapacityAsTheStorageClassUser(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	fencer := e.cephUser(t, "monoceph-capacity-test", "mon", `allow command "osd blocklist"`)
	fencerCred, err := ceph.CredentialsFromSecrets(fencer)
	if err != nil {
		t.Fatal(err)
	}
	// as the sidecars send them: the provisioner's keys in GetCapacity, the PVC's in CreateVolume
	classA := e.params()
	classB := e.params("imageFeatures", "layering,exclusive-lock")
	asGetCapacity := func(p map[string]string) map[string]string {
		out := map[string]string{"csi.storage.k8s.io/provisioner-secret-name": "ceph", "csi.storage.k8s.io/provisioner-secret-namespace": "monoceph"}
		for k, v := range p {
			out[k] = v
		}
		return out
	}
	create := func(ctx context.Context, name string, p, secrets map[string]string) (*csi.CreateVolumeResponse, error) {
		req := e.createReq(name, 8*mib, nil)
		req.Parameters, req.Secrets = map[string]string{"csi.storage.k8s.io/pvc/name": name}, secrets
		for k, v := range p {
			req.Parameters[k] = v
		}
		return e.client.CreateVolume(ctx, req)
	}

	var volID string
	steps := []struct {
		name   string
		do     func() error
		classA codes.Code // GetCapacity of each class afterwards, 20 times each
		classB codes.Code
	}{
		{"the admin's and the fencing user's connections are open, no class user known", func() error {
			conn, err := e.ctrl.opts.Pool.Get(ctx, e.cl.Monitors, fencerCred)
			if err == nil {
				t.Cleanup(conn.Release)
			}
			return err
		}, codes.Unavailable, codes.Unavailable},
		{"class A's CreateVolume as the admin", func() error {
			v, err := create(ctx, "capacity-a", classA, e.cl.Secrets())
			volID = v.GetVolume().GetVolumeId()
			return err
		}, codes.OK, codes.Unavailable},
		{"class B's CreateVolume as the fencing user (connects, then cannot read the osdmap)", func() error {
			short, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			if _, err := create(short, "capacity-b", classB, fencer); status.Code(err) != codes.DeadlineExceeded {
				return fmt.Errorf("CreateVolume = %v, want DEADLINE_EXCEEDED", err)
			}
			return nil
		}, codes.OK, codes.PermissionDenied},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		for class, want := range map[string]codes.Code{"A": s.classA, "B": s.classB} {
			p := classA
			if class == "B" {
				p = classB
			}
			for range 20 { // the old lookup took any pooled connection, a random one
				resp, err := e.client.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: asGetCapacity(p)})
				if status.Code(err) != want || (err == nil && resp.GetAvailableCapacity() <= 0) {
					t.Fatalf("after %s: GetCapacity of class %s = %v, %v; want %v", s.name, class, resp, err, want)
				}
			}
		}
	}
	if _, err := e.client.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: volID, Secrets: e.cl.Secrets()}); err != nil {
		t.Fatal(err)
	}
	e.assertEmpty(t)
}
