package cephfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/clustermap"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// These need no cluster: parameter parsing and request matching are plain functions.

func unitController(t *testing.T) *Controller {
	t.Helper()
	p := filepath.Join(t.TempDir(), "clusters.json")
	if err := os.WriteFile(p, []byte(`[{"clusterID":"c","monitors":["127.0.0.1"],"cephFS":{"subvolumeGroup":"mapgroup"}},
		{"clusterID":"d","monitors":["127.0.0.1"]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := clustermap.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return NewController(Options{Clusters: store})
}

func TestValidateCreateParams(t *testing.T) {
	c := unitController(t)
	snapID := volid.CephFSSnapshot{CephFSVolume: volid.CephFSVolume{ClusterID: "c", FSCID: 1, UID: "aaaaaaaaaaaaaaaa"}, SnapUID: "bbbbbbbbbbbbbbbb"}.String()
	fromSnap := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}}
	p := func(kv ...string) map[string]string {
		m := map[string]string{"clusterID": "c", "fsName": "myfs"}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "-" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name     string
		req      *csi.CreateVolumeRequest
		errField string // "" = valid
		check    func(t *testing.T, r request)
	}{
		{"group from the cluster map", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p()}, "", func(t *testing.T, r request) {
			if r.params.Group != "mapgroup" || !r.params.BackingSnapshot || r.shallow {
				t.Errorf("params %+v shallow %v", r.params, r.shallow)
			}
		}},
		{"default group", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("clusterID", "d")}, "", func(t *testing.T, r request) {
			if r.params.Group != "csi" {
				t.Errorf("group = %q, want csi", r.params.Group)
			}
		}},
		{"read-only from a snapshot is shallow", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rox, Parameters: p(), VolumeContentSource: fromSnap}, "", func(t *testing.T, r request) {
			if !r.shallow {
				t.Error("not shallow")
			}
		}},
		{"backingSnapshot=false copies", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rox, Parameters: p("backingSnapshot", "false"), VolumeContentSource: fromSnap}, "", func(t *testing.T, r request) {
			if r.shallow {
				t.Error("shallow despite backingSnapshot=false")
			}
		}},
		{"missing fsName", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("fsName", "-")}, "fsName", nil},
		{"missing clusterID", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("clusterID", "-")}, "clusterID", nil},
		{"unknown cluster", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("clusterID", "x")}, "clusterID", nil},
		{"group injection", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("subvolumeGroup", "../x")}, "subvolumeGroup", nil},
		{"bad mounter", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("mounter", "nfs")}, "mounter", nil},
		// names the node would refuse at stage (internal/cephname) are refused at create
		{"names with dots and dashes", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx,
			Parameters: p("fsName", "my-fs", "pool", "cephfs.my-fs.data", "subvolumeGroup", "k8s_group.1")}, "", func(t *testing.T, r request) {
			if r.params.FSName != "my-fs" || r.params.Pool != "cephfs.my-fs.data" || r.params.Group != "k8s_group.1" {
				t.Errorf("params %+v", r.params)
			}
		}},
		{"fsName as an option", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("fsName", "-oX")}, `parameters["fsName"]`, nil},
		{"fsName as a second mount option", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("fsName", "myfs,secretfile=/x")}, `parameters["fsName"]`, nil},
		{"fsName as a path", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("fsName", "../myfs")}, `parameters["fsName"]`, nil},
		{"pool as an option", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("pool", "--pool=x")}, `parameters["pool"]`, nil},
		{"pool with a blank", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("pool", "data x")}, `parameters["pool"]`, nil},
		{"group as an option", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("subvolumeGroup", "-g")}, `parameters["subvolumeGroup"]`, nil},
		{"group as a dot file", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("subvolumeGroup", ".snap")}, `parameters["subvolumeGroup"]`, nil},
		{"group too long", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("subvolumeGroup", strings.Repeat("g", 65))}, `parameters["subvolumeGroup"]`, nil},
		{"kernel options with a space", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("kernelMountOptions", "ro, secretfile=/x")}, "kernelMountOptions", nil},
		{"bad backingSnapshot", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("backingSnapshot", "maybe")}, "backingSnapshot", nil},
		// ceph-csi's keys: accepted where they agree, refused naming the feature
		{"ceph-csi class as written", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx,
			Parameters: p("volumeNamePrefix", "csi-vol-", "encrypted", "false", "encryptionKMSID", "vault", "mounter", "fuse")}, "", func(t *testing.T, r request) {}},
		{"ceph-csi shallow volume from a ceph-csi snapshot", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rox, Parameters: p(),
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{
				SnapshotId: "0001-0001-c-0000000000000001-c050fde3-2a93-4a45-900c-96bcc96c6b40"}}}}, "", func(t *testing.T, r request) {
			if !r.shallow || r.src.Snap == nil || r.src.Snap.CSI == nil {
				t.Errorf("a ceph-csi snapshot source: %+v shallow %v", r.src, r.shallow)
			}
		}},
		{"encrypted", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("encrypted", "true")}, "encryption", nil},
		{"name prefix", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("volumeNamePrefix", "k8s-")}, "volumeNamePrefix", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := c.validateCreate(tt.req)
			if tt.errField == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				tt.check(t, r)
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.errField) {
				t.Fatalf("err = %v, want INVALID_ARGUMENT naming %s", err, tt.errField)
			}
		})
	}
	if _, err := c.validateCreate(&csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: rwx, Parameters: p("bogus", "1")}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestCompatibleRequest(t *testing.T) {
	rec := &journal.Record{UID: "aaaaaaaaaaaaaaaa", Name: "v", Attrs: map[string]string{attrSize: "1048576", attrSource: "", attrKind: kindSubvolume}}
	req := func(required, limit int64) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit}}
	}
	snap := source{Snap: &snapshotID{Own: volid.CephFSSnapshot{CephFSVolume: volid.CephFSVolume{ClusterID: "c", FSCID: 1, UID: "cccccccccccccccc"}, SnapUID: "dddddddddddddddd"}}}
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		src  source
		kind string
		code codes.Code
	}{
		{"same", req(1<<20, 0), source{}, kindSubvolume, codes.OK},
		{"bigger", req(2<<20, 0), source{}, kindSubvolume, codes.AlreadyExists},
		{"other source", req(1<<20, 0), snap, kindSubvolume, codes.AlreadyExists},
		{"shallow asked, subvolume made", req(1<<20, 0), source{}, kindShallow, codes.AlreadyExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := compatible(rec, tt.req, tt.src, tt.kind); status.Code(err) != tt.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.code)
			}
		})
	}
}
