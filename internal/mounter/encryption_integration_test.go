package mounter

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/hostexec"
	"github.com/monoceph/monoceph/internal/kms"
	"github.com/monoceph/monoceph/internal/rbd/attach"
)

// TestRBDEncryptedCustody: the key of an encrypted image travels with its FUSE connection and
// nowhere else. A restarted node plugin (a new client, no key) learns it from the holder that
// serves the image; a restarted holder gets it from the plugin with the connection and opens
// the image again: data written before both restarts reads back as plaintext, the image holds
// only ciphertext, and no file of the state directory holds the passphrase. A holder asked to
// serve the encrypted image without a key refuses.
func TestRBDEncryptedCustody(t *testing.T) {
	r := newImageRig(t, "mounter-enc")
	cl, pool, name, state, work, onImage := r.cl, r.pool, r.name, r.state, r.work, r.onImage
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const pass = "custody passphrase"
	// formatted as CreateVolume formats it (the default provider: the passphrase opens LUKS)
	if err := onImage(func(io *rados.IOContext) error {
		o := rbd.NewRbdImageOptions()
		defer o.Destroy()
		if err := rbd.CreateImage(io, name, 48<<20, o); err != nil {
			return err
		}
		img, err := rbd.OpenImage(io, name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer img.Close()
		if err := img.EncryptionFormat(rbd.EncryptionOptionsLUKS2{Alg: rbd.EncryptionAlgorithmAES256, Passphrase: []byte(pass)}); err != nil {
			return err
		}
		return img.SetMetadata(kms.StateKey, kms.ImageState{Format: kms.FormatLUKS2, HeaderBytes: 16 << 20, VolumeID: "v"}.String())
	}); err != nil {
		t.Fatal(err)
	}
	sock := "unix://" + filepath.Join(state, "mounter.sock")
	_, stopFirst := rbdHolder(t, state, pool)
	plugin := func() (*Client, attach.Attacher) {
		c, err := NewClient(sock)
		if err != nil {
			t.Fatal(err)
		}
		return c, c.RBD(attach.NewFuse(hostexec.New(time.Minute), nil))
	}
	_, a := plugin()
	req := attach.Request{Image: attach.Image{Pool: cl.RBDPool, Name: name}, MonHost: cl.Monitors, Cred: cl.Admin, WorkDir: work,
		Encryption: &attach.Encryption{Passphrase: []byte(pass)}}
	at, err := a.Attach(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Detach(context.Background(), at) })
	data := bytes.Repeat([]byte("custody-plaintext"), 256)
	f, err := os.OpenFile(at.Device, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data, 4<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Log("attached and written through the first holder")

	// without a key the holder serves nothing of the image, at another work directory
	other := filepath.Join(state, "fedcba9876543210fedcba98")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	plain := req
	plain.WorkDir, plain.Encryption = other, nil
	if _, err := a.Attach(ctx, plain); !errors.Is(err, attach.ErrNoKey) || !strings.Contains(err.Error(), "no key came with the request") {
		t.Fatalf("attach of the encrypted image without a key: %v, want ErrNoKey", err)
	}

	t.Log("refused without a key")
	// the node plugin restarts: its recovery asks the holder to keep the volume, without a key
	c2, a2 := plugin()
	keep := req
	keep.Encryption, keep.KeepOnly = nil, true
	if _, err := a2.Attach(ctx, keep); err != nil {
		t.Fatalf("recovery after a plugin restart: %v", err)
	}
	if k := c2.kept(work); k == nil || k.Encryption == nil || string(k.Encryption.Passphrase) != pass {
		t.Fatal("the restarted plugin did not get the key with the connection")
	}

	// then the holder restarts: the plugin hands it connection and key
	t.Log("the restarted plugin has the key")
	stopFirst()
	rbdHolder(t, state, pool)
	t.Log("second holder serving")
	bt, err := a2.Attach(ctx, keep)
	if err != nil {
		t.Fatalf("recovery after a holder restart: %v", err)
	}
	t.Log("second holder resumed the connection")
	got := make([]byte, len(data))
	f, err = os.Open(bt.Device)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.ReadAt(got, 4<<20)
	f.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading back through the new holder: %v (the data differs: %v)", err, !bytes.Equal(got, data))
	}
	if err := onImage(func(io *rados.IOContext) error {
		img, err := rbd.OpenImageReadOnly(io, name, rbd.NoSnapshot)
		if err != nil {
			return err
		}
		defer img.Close()
		raw := make([]byte, 48<<20)
		n, _ := img.ReadAt(raw, 0)
		if bytes.Contains(raw[:n], data[:64]) {
			return errors.New("the image holds the plaintext")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(state, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p == bt.FuseDir {
			return filepath.SkipDir // the image itself, served by this process
		}
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(pass)) {
			t.Errorf("%s holds the passphrase", p)
		}
		return nil
	})
	if err := a2.Detach(ctx, bt); err != nil {
		t.Fatal(err)
	}
}
