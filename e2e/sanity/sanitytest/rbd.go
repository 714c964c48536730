package sanitytest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/monoceph/monoceph/internal/driver"
	"github.com/monoceph/monoceph/internal/kms"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephtest"
)

// rbdMutable are the VolumeAttributesClass parameters of the ModifyVolume specs.
var rbdMutable = map[string]string{"qosWriteIopsLimit": "5000", "qosWriteIopsBurst": "10000", "qosWriteBpsLimit": "200Mi"}

// RBD runs the suite for the RBD driver in a RADOS namespace of its own, and fails if the run
// leaves an image, a trash entry or a journal key there.
func RBD(t *testing.T, accessType string) {
	runRBD(t, accessType, func(ns string) Options {
		return Options{Parameters: map[string]string{"pool": cephtest.Env(t).RBDPool, "radosNamespace": ns, "mounter": "fuse"},
			MutableParameters: rbdMutable}
	})
}

// RBDEncrypted runs the suite for the RBD driver with every volume encrypted (librbd's LUKS2 in
// the FUSE server): a class of ceph-csi's keys, encrypted with a per-volume key kept in the
// image's metadata (the "metadata" KMS type), wrapped by the Secret's passphrase.
func RBDEncrypted(t *testing.T, accessType string) {
	cfg := filepath.Join(t.TempDir(), "kms.json")
	if err := os.WriteFile(cfg, []byte(`{"meta":{"encryptionKMSType":"metadata"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := cephtest.Env(t).Secrets()
	secrets[kms.PassphraseKey] = "sanity passphrase"
	runRBD(t, accessType, func(ns string) Options {
		return Options{Parameters: map[string]string{"pool": cephtest.Env(t).RBDPool, "radosNamespace": ns, "mounter": "fuse",
			"encrypted": "true", "encryptionKMSID": "meta"},
			MutableParameters: rbdMutable, Secrets: secrets, Configure: func(c *driver.Config) { c.KMSConfig = cfg }}
	})
}

// CephCSIRBD runs the suite under ceph-csi's RBD driver name with the parameters of ceph-csi's
// example StorageClass (the namespace in the cluster map, as ceph-csi's config.json has it;
// tryOtherMounters, so a node without krbd, like this one, falls back to the fuse mounter).
func CephCSIRBD(t *testing.T, accessType string) {
	runRBD(t, accessType, func(ns string) Options {
		return Options{DriverName: "rbd.csi.ceph.com", ClusterMap: fmt.Sprintf(`"rbd":{"radosNamespace":%q}`, ns),
			Parameters: map[string]string{"pool": cephtest.Env(t).RBDPool, "imageFeatures": "layering", "imageFormat": "2",
				"csi.storage.k8s.io/fstype": "ext4", "tryOtherMounters": "true"},
			MutableParameters: rbdMutable}
	})
}

func runRBD(t *testing.T, accessType string, options func(ns string) Options) {
	cl := cephtest.Env(t)
	p := ceph.NewPool(ceph.PoolOptions{})
	t.Cleanup(p.Close)
	conn, err := p.Get(context.Background(), cl.Monitors, cl.Admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	io, err := conn.Rados().OpenIOContext(cl.RBDPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(io.Destroy)
	ns := fmt.Sprintf("sanity-%s-%d", accessType, time.Now().UnixNano()%1e9)
	if err := rbd.NamespaceCreate(io, ns); err != nil {
		t.Fatal(err)
	}
	o := options(ns)
	o.Type, o.AccessType = "rbd", accessType
	// anything left is reported: images, trash entries, journal objects of either driver
	o.Leftovers = func(t *testing.T) []string {
		io.SetNamespace(ns)
		left, err := cephtest.RBDLeftovers(io)
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			_ = io.ListObjects(func(oid string) { _ = io.Delete(oid) })
			io.SetNamespace("")
			_ = rbd.NamespaceRemove(io, ns)
		}
		return left
	}
	Run(t, o)
}
