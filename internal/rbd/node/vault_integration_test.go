//go:build vault

// The Vault providers' tests need a Vault binary whose build takes a third of CI's time: they
// run in make test-vault, not in make test.

package node

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/container-storage-interface/spec/lib/go/csi"
	vault "github.com/hashicorp/vault/api"
	"github.com/monoceph/monoceph/internal/cephtest"
	"github.com/monoceph/monoceph/internal/hostmount"
	"github.com/monoceph/monoceph/internal/kms"
	rbdctl "github.com/monoceph/monoceph/internal/rbd"
	"github.com/monoceph/monoceph/internal/vaulttest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// vaultRig is the node rig plus a controller on the same cluster, a real Vault with a KV v2
// mount and a transit key, and a RADOS namespace of the test's own (for the leak checks).
type vaultRig struct {
	*rig
	v    *vaulttest.Server
	ctrl *rbdctl.Controller
	ns   string
	io   *rados.IOContext
}

func newVaultRig(t *testing.T) *vaultRig {
	r := newRig(t)
	v := vaulttest.Start(t)
	v.EnableKV(t, "kv-csi")
	v.EnableTransit(t, "transit-csi", "monoceph")
	ctrl, io, ns := r.withKMS(t, fmt.Sprintf(`{
		"vault-kv": {"encryptionKMSType": "vaulttokens", "vaultAddress": %q, "vaultBackend": "kv-v2", "vaultBackendPath": "kv-csi/"},
		"vault-transit": {"encryptionKMSType": "vaulttransit", "vaultAddress": %q, "vaultBackendPath": "transit-csi", "vaultTransitKey": "monoceph"},
		"vault-transit-nokey": {"encryptionKMSType": "vaulttransit", "vaultAddress": %q, "vaultBackendPath": "transit-csi", "vaultTransitKey": "absent"}}`, v.Addr, v.Addr, v.Addr), "vault")
	return &vaultRig{rig: r, v: v, ctrl: ctrl, ns: ns, io: io}
}

func (r *vaultRig) create(name, kmsID string, secrets map[string]string) (*csi.Volume, error) {
	resp, err := r.ctrl.CreateVolume(r.ctx, &csi.CreateVolumeRequest{
		Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 * mib},
		VolumeCapabilities: []*csi.VolumeCapability{blockCap(rwo)},
		Parameters: map[string]string{"clusterID": r.cl.ID, "pool": r.cl.RBDPool, "radosNamespace": r.ns,
			"encrypted": "true", "encryptionKMSID": kmsID},
		Secrets: secrets,
	})
	return resp.GetVolume(), err
}

// metadata is every metadata value of the volume's only image.
func (r *vaultRig) metadata(t *testing.T) map[string]string {
	t.Helper()
	names, err := rbd.GetImageNames(r.io)
	if err != nil || len(names) != 1 {
		t.Fatalf("images %v (%v), want one", names, err)
	}
	img, err := rbd.OpenImageReadOnly(r.io, names[0], rbd.NoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	out := map[string]string{}
	for _, k := range []string{kms.StateKey, kms.MetadataDEKKey} {
		if v, err := img.GetMetadata(k); err == nil {
			out[k] = v
		}
	}
	return out
}

// assertEmpty: nothing of the driver in the test's namespace (no image, journal key or object).
func (r *vaultRig) assertEmpty(t *testing.T) {
	t.Helper()
	left, err := cephtest.RBDLeftovers(r.io)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("left in namespace %s: %v", r.ns, left)
	}
}

// TestVaultProviders: a volume of each Vault provider is created (its DEK in Vault's KV, or
// sealed by the transit key in the image's metadata, never in the clear in the metadata),
// staged through the node's own path (the DEK from Vault, loaded by the FUSE server), written
// and read back as plaintext while the image holds ciphertext; a wrong token is refused with
// PERMISSION_DENIED at both ends; delete removes the KV DEK, and again is fine.
func TestVaultProviders(t *testing.T) {
	r := newVaultRig(t)
	secrets := vaulttest.Secrets(r.cl.Secrets(), r.v.Token)
	wrong := vaulttest.Secrets(r.cl.Secrets(), "hvs.not-a-token")
	for _, kmsID := range []string{"vault-kv", "vault-transit"} {
		t.Run(kmsID, func(t *testing.T) {
			if _, err := r.create("pvc-wrong-"+kmsID, kmsID, wrong); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "permission denied") {
				t.Fatalf("CreateVolume with a wrong token: %v, want PERMISSION_DENIED from Vault", err)
			}
			r.assertEmpty(t)

			vol, err := r.create("pvc-"+kmsID, kmsID, secrets)
			if err != nil {
				t.Fatal(err)
			}
			id := vol.GetVolumeId()
			md := r.metadata(t)
			if md[kms.StateKey] == "" {
				t.Fatalf("no %s on the image", kms.StateKey)
			}
			var dek string
			kv := r.v.Client().KVv2("kv-csi")
			switch kmsID {
			case "vault-kv":
				s, err := kv.Get(r.ctx, id)
				if err != nil {
					t.Fatalf("the DEK in Vault: %v", err)
				}
				dek, _ = s.Data["passphrase"].(string)
				if _, ok := md[kms.MetadataDEKKey]; ok {
					t.Errorf("the image has %s with a KV provider", kms.MetadataDEKKey)
				}
			case "vault-transit":
				sealed := md[kms.MetadataDEKKey]
				if !strings.HasPrefix(sealed, "vault:v1:") {
					t.Fatalf("%s = %q, want a transit ciphertext", kms.MetadataDEKKey, sealed)
				}
				s, err := r.v.Client().Logical().Write("transit-csi/decrypt/monoceph", map[string]any{"ciphertext": sealed})
				if err != nil {
					t.Fatal(err)
				}
				p, _ := s.Data["plaintext"].(string)
				b, err := decodeB64(p)
				if err != nil {
					t.Fatal(err)
				}
				dek = string(b)
				if _, err := kv.Get(r.ctx, id); !errors.Is(err, vault.ErrSecretNotFound) {
					t.Errorf("a transit volume's DEK in KV: %v", err)
				}
			}
			if len(dek) != 28 {
				t.Fatalf("DEK of %d characters, want 28", len(dek))
			}
			for k, v := range md {
				if strings.Contains(v, dek) || strings.Contains(v, b64(dek)) {
					t.Errorf("image metadata %s holds the DEK in the clear", k)
				}
			}

			base := r.workspace(id, "target")
			staging, target := filepath.Join(base, "staging"), filepath.Join(base, "target")
			stage := func(sec map[string]string) error {
				_, err := r.s.NodeStageVolume(r.ctx, &csi.NodeStageVolumeRequest{VolumeId: id, StagingTargetPath: staging,
					VolumeCapability: blockCap(rwo), VolumeContext: vol.GetVolumeContext(), Secrets: sec})
				return err
			}
			if err := stage(wrong); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "node-stage secret") {
				t.Fatalf("stage with a wrong token: %v, want PERMISSION_DENIED naming the node-stage secret", err)
			}
			if err := stage(secrets); err != nil {
				t.Fatal(err)
			}
			if err := r.publish(id, staging, target, blockCap(rwo), false); err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte("vault plaintext "+kmsID+"\n"), 500)
			writeData(t, target, true, data)
			if got := readData(t, target, true, len(data)); !bytes.Equal(got, data) {
				t.Fatal("the data does not read back")
			}
			if err := r.unpublish(id, target); err != nil {
				t.Fatal(err)
			}
			if err := r.unstage(id, staging); err != nil {
				t.Fatal(err)
			}
			r.assertNoSecretOnDisk(dek, r.v.Token)
			names, _ := rbd.GetImageNames(r.io)
			img, err := rbd.OpenImageReadOnly(r.io, names[0], rbd.NoSnapshot)
			if err != nil {
				t.Fatal(err)
			}
			raw := make([]byte, 48*mib)
			n, _ := img.ReadAt(raw, 0)
			img.Close()
			if bytes.Contains(raw[:n], data[:64]) {
				t.Fatal("the image holds the plaintext")
			}

			for i := 0; i < 2; i++ { // the second delete finds nothing: fine
				if _, err := r.ctrl.DeleteVolume(r.ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets}); err != nil {
					t.Fatalf("delete %d: %v", i+1, err)
				}
			}
			if kmsID == "vault-kv" {
				if _, err := kv.Get(r.ctx, id); !errors.Is(err, vault.ErrSecretNotFound) {
					t.Fatalf("the DEK after DeleteVolume: %v, want gone", err)
				}
				if m, err := kv.GetMetadata(r.ctx, id); err == nil && m != nil {
					t.Fatalf("the DEK's versions after DeleteVolume: %+v, want destroyed", m)
				}
			}
			r.assertEmpty(t)
		})
	}
}

// TestVaultUnavailable: a sealed or stopped Vault fails CreateVolume with UNAVAILABLE before
// anything is written: no image, journal key or reservation is left.
func TestVaultUnavailable(t *testing.T) {
	r := newVaultRig(t)
	secrets := vaulttest.Secrets(r.cl.Secrets(), r.v.Token)
	r.v.Seal(t)
	for _, kmsID := range []string{"vault-kv", "vault-transit"} {
		if _, err := r.create("pvc-sealed-"+kmsID, kmsID, secrets); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "sealed") {
			t.Fatalf("%s: CreateVolume with Vault sealed: %v, want UNAVAILABLE saying sealed", kmsID, err)
		}
	}
	r.assertEmpty(t)
	r.v.Stop()
	for _, kmsID := range []string{"vault-kv", "vault-transit"} {
		start := time.Now()
		_, err := r.create("pvc-down-"+kmsID, kmsID, secrets)
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("%s: CreateVolume with Vault stopped: %v, want UNAVAILABLE", kmsID, err)
		}
		if d := time.Since(start); d > kms.VaultTimeout+5*time.Second {
			t.Errorf("%s: the refusal took %v", kmsID, d)
		}
	}
	r.assertEmpty(t)
}

// TestVaultPrecheck: a token whose policies lack what the provider will do (KV create and update,
// transit encrypt) and a transit key Vault does not have fail CreateVolume before anything is
// written (PERMISSION_DENIED naming the path, INVALID_ARGUMENT naming vaultTransitKey): no
// image, journal key or reservation is left.
func TestVaultPrecheck(t *testing.T) {
	r := newVaultRig(t)
	token := func(name, policy string) string {
		t.Helper()
		c := r.v.Client()
		if err := c.Sys().PutPolicyWithContext(r.ctx, name, policy); err != nil {
			t.Fatal(err)
		}
		s, err := c.Auth().Token().CreateWithContext(r.ctx, &vault.TokenCreateRequest{Policies: []string{name}})
		if err != nil {
			t.Fatal(err)
		}
		return s.Auth.ClientToken
	}
	kvReadOnly := token("kv-read-only", `path "kv-csi/data/*" { capabilities = ["read"] }`)
	decryptOnly := token("decrypt-only", `path "transit-csi/decrypt/*" { capabilities = ["update"] }
path "transit-csi/keys/*" { capabilities = ["read"] }`)
	for _, tt := range []struct {
		kmsID, token string
		code         codes.Code
		says         string
	}{
		{"vault-kv", kvReadOnly, codes.PermissionDenied, "kv-csi/data/"},
		{"vault-transit", decryptOnly, codes.PermissionDenied, "transit-csi/encrypt/monoceph"},
		{"vault-transit-nokey", r.v.Token, codes.InvalidArgument, "vaultTransitKey"},
	} {
		_, err := r.create("pvc-precheck-"+tt.kmsID, tt.kmsID, vaulttest.Secrets(r.cl.Secrets(), tt.token))
		if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.says) {
			t.Fatalf("%s: CreateVolume: %v, want %v saying %q", tt.kmsID, err, tt.code, tt.says)
		}
	}
	r.assertEmpty(t)
}

// TestVaultDeleteChecksToken: DeleteVolume of a KV volume with a token that could not delete
// its DEK (none, or one without the delete capability) fails before the image goes; with one
// that can, the image and the DEK go.
func TestVaultDeleteChecksToken(t *testing.T) {
	r := newVaultRig(t)
	c := r.v.Client()
	if err := c.Sys().PutPolicyWithContext(r.ctx, "kv-no-delete", `path "kv-csi/data/*" { capabilities = ["create", "update", "read"] }`); err != nil {
		t.Fatal(err)
	}
	tok, err := c.Auth().Token().CreateWithContext(r.ctx, &vault.TokenCreateRequest{Policies: []string{"kv-no-delete"}})
	if err != nil {
		t.Fatal(err)
	}
	vol, err := r.create("pvc-delete-check", "vault-kv", vaulttest.Secrets(r.cl.Secrets(), r.v.Token))
	if err != nil {
		t.Fatal(err)
	}
	del := func(secrets map[string]string) error {
		_, err := r.ctrl.DeleteVolume(r.ctx, &csi.DeleteVolumeRequest{VolumeId: vol.GetVolumeId(), Secrets: secrets})
		return err
	}
	for _, tt := range []struct {
		name    string
		secrets map[string]string
		code    codes.Code
	}{
		{"no token", r.cl.Secrets(), codes.InvalidArgument},
		{"no delete capability", vaulttest.Secrets(r.cl.Secrets(), tok.Auth.ClientToken), codes.PermissionDenied},
	} {
		if err := del(tt.secrets); status.Code(err) != tt.code {
			t.Fatalf("%s: DeleteVolume: %v, want %v", tt.name, err, tt.code)
		}
		r.metadata(t) // the image is still there
		if _, err := c.KVv2("kv-csi").Get(r.ctx, vol.GetVolumeId()); err != nil {
			t.Fatalf("%s: the DEK after the refused DeleteVolume: %v", tt.name, err)
		}
	}
	if err := del(vaulttest.Secrets(r.cl.Secrets(), r.v.Token)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.KVv2("kv-csi").Get(r.ctx, vol.GetVolumeId()); !errors.Is(err, vault.ErrSecretNotFound) {
		t.Fatalf("the DEK after DeleteVolume: %v, want gone", err)
	}
	r.assertEmpty(t)
}

// assertNoSecretOnDisk: no file of the node's state holds the DEK or the Vault token.
func (r *rig) assertNoSecretOnDisk(secrets ...string) {
	r.t.Helper()
	_ = filepath.WalkDir(r.s.opts.StateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if m, _ := hostmount.MountAt(p); m != nil {
				return filepath.SkipDir // a served image
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				r.t.Errorf("%s holds a secret", p)
			}
		}
		return nil
	})
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func decodeB64(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
