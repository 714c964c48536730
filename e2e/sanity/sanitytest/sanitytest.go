// Package sanitytest runs the kubernetes-csi sanity suite (csi-test v5) in-process against a
// monoceph driver started on the local Ceph cluster, and reports every skipped spec with its
// reason. Ginkgo allows one suite run per process, so each access type and backend has its own
// test package calling Run.
package sanitytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"github.com/monoceph/monoceph/e2e/localdriver"
	"github.com/monoceph/monoceph/internal/driver"
	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"gopkg.in/yaml.v3"
)

// Options select what is tested.
type Options struct {
	Type       driver.Type
	AccessType string // "mount" or "block"
	// Parameters are the StorageClass parameters of every test volume; clusterID and secrets
	// are added.
	Parameters map[string]string
	// MutableParameters are a VolumeAttributesClass's parameters valid for the driver, for the
	// ModifyVolume specs.
	MutableParameters map[string]string
	// ClusterMap, if set, is the cluster map entry's JSON fields after clusterID and monitors
	// (e.g. `"cephFS":{"subvolumeGroup":"x"}`).
	ClusterMap string
	// DriverName, if set, replaces the type's default driver name (e.g. ceph-csi's).
	DriverName string
	// Secrets, if set, replace the userID/userKey every RPC carries (e.g. ceph-csi's CephFS
	// Secret: adminID/adminKey).
	Secrets map[string]string
	// Configure, if set, changes the driver's configuration (e.g. a KMS configuration).
	Configure func(*driver.Config)
	// Leftovers, if set, runs after the suite and reports what the run left in Ceph; anything
	// it returns fails the test.
	Leftovers func(t *testing.T) []string
}

// skipped collects skipped specs for the summary.
var skipped []string

var _ = ginkgo.ReportAfterEach(func(r ginkgo.SpecReport) {
	if r.State == types.SpecStateSkipped {
		reason := strings.TrimSpace(r.Failure.Message)
		if reason == "" {
			reason = "filtered out"
		}
		skipped = append(skipped, fmt.Sprintf("%s: %s", r.FullText(), reason))
	}
})

// Run starts the driver in all-in-one mode on a temporary socket and runs the sanity suite.
func Run(t *testing.T, o Options) {
	var configure []func(*driver.Config)
	if o.Configure != nil {
		configure = append(configure, o.Configure)
	}
	d := localdriver.StartNamed(t, o.Type, o.DriverName, o.ClusterMap, configure...)
	cl, dir := d.Cluster, d.Dir
	if o.Secrets == nil {
		o.Secrets = cl.Secrets()
	}
	secrets := map[string]map[string]string{}
	for _, k := range []string{"CreateVolumeSecret", "DeleteVolumeSecret", "ControllerValidateVolumeCapabilitiesSecret",
		"NodeStageVolumeSecret", "NodePublishVolumeSecret", "CreateSnapshotSecret", "DeleteSnapshotSecret",
		"ControllerExpandVolumeSecret", "ListSnapshotsSecret", "GetSnapshotSecret", "ControllerModifyVolumeSecret",
		"ControllerPublishVolumeSecret", "ControllerUnpublishVolumeSecret"} {
		secrets[k] = o.Secrets
	}
	b, err := yaml.Marshal(secrets)
	if err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, b, 0o600); err != nil {
		t.Fatal(err)
	}

	params := map[string]string{"clusterID": cl.ID}
	for k, v := range o.Parameters {
		params[k] = v
	}
	cfg := sanity.NewTestConfig()
	cfg.Address = d.Socket
	cfg.SecretsFile = secretsFile
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeParameters = params
	cfg.TestVolumeAccessType = o.AccessType
	cfg.TestVolumeMutableParameters = o.MutableParameters
	// small volumes: the local cluster keeps data in RAM
	cfg.TestVolumeSize = 64 << 20
	cfg.TestVolumeExpandSize = 128 << 20
	cfg.IdempotentCount = 3
	sanity.Test(t, cfg)

	t.Logf("%d specs skipped:", len(skipped))
	for _, s := range skipped {
		t.Log("  SKIPPED " + s)
	}
	if o.Leftovers != nil {
		if left := o.Leftovers(t); len(left) > 0 {
			t.Errorf("the sanity run left %d things in Ceph: %v", len(left), left)
		}
	}
}
