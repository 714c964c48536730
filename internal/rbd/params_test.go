package rbd

import (
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/journal"
	"github.com/monoceph/monoceph/internal/volid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// These need no cluster: parameter parsing and the matching of a repeated request against its
// reservation are plain functions.

func TestParseVolumeParams(t *testing.T) {
	base := map[string]string{"clusterID": "c", "pool": "rbd"}
	with := func(kv ...string) map[string]string {
		p := map[string]string{}
		for k, v := range base {
			p[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "-" {
				delete(p, kv[i])
			} else {
				p[kv[i]] = kv[i+1]
			}
		}
		return p
	}
	tests := []struct {
		name     string
		in       map[string]string
		errField string // "" = valid; else the parameter the INVALID_ARGUMENT must name
		check    func(t *testing.T, v volumeParams)
	}{
		{"defaults", base, "", func(t *testing.T, v volumeParams) {
			if !slices.Equal(v.Features, DefaultImageFeatures) || v.Mounter != "krbd" || v.nsSet {
				t.Errorf("defaults = %+v", v)
			}
		}},
		{"sidecar keys ignored", with("csi.storage.k8s.io/pvc/name", "x", "csi.storage.k8s.io/fstype", "xfs"), "", nil},
		{"namespace set", with("radosNamespace", "k8s"), "", func(t *testing.T, v volumeParams) {
			if v.Namespace != "k8s" || !v.nsSet {
				t.Errorf("namespace = %q set %v", v.Namespace, v.nsSet)
			}
		}},
		{"empty namespace is set too", with("radosNamespace", ""), "", func(t *testing.T, v volumeParams) {
			if !v.nsSet {
				t.Error("an explicit empty radosNamespace must override the cluster map's")
			}
		}},
		{"features deduplicated", with("imageFeatures", "layering, layering,exclusive-lock"), "", func(t *testing.T, v volumeParams) {
			if !slices.Equal(v.Features, []string{"exclusive-lock", "layering"}) { // sorted, as journal attributes compare them
				t.Errorf("features = %v", v.Features)
			}
		}},
		{"missing cluster", with("clusterID", "-"), "clusterID", nil},
		{"missing pool", with("pool", "-"), "pool", nil},
		{"unknown key", with("imagefeatures", "layering"), "", nil}, // checked below: names the key
		{"unknown feature", with("imageFeatures", "layering,teleport"), "imageFeatures", nil},
		{"feature without its dependency", with("imageFeatures", "layering,fast-diff"), "imageFeatures", nil},
		{"bad mounter", with("mounter", "nfs"), "mounter", nil},
		{"bad fstype", with("csi.storage.k8s.io/fstype", "btrfs"), "csi.storage.k8s.io/fstype", nil},
		{"namespace too long", with("radosNamespace", strings.Repeat("n", 33)), "radosNamespace", nil},
		{"namespace injection", with("radosNamespace", "../x"), "radosNamespace", nil},
		// names the node would refuse at stage (internal/cephname) are refused at create
		{"pool and data pool with dots", with("pool", "k8s.rbd", "dataPool", "ec-data_1"), "", func(t *testing.T, v volumeParams) {
			if v.Pool != "k8s.rbd" || v.DataPool != "ec-data_1" {
				t.Errorf("pools = %q, %q", v.Pool, v.DataPool)
			}
		}},
		{"pool as an option", with("pool", "-oX"), "pool", nil},
		{"pool as a second argument", with("pool", "rbd --id admin"), "pool", nil},
		{"pool as a path", with("pool", "../rbd"), "pool", nil},
		{"pool too long", with("pool", strings.Repeat("p", 256)), "pool", nil},
		{"data pool as an option", with("dataPool", "--keyfile=/etc/shadow"), "dataPool", nil},
		{"data pool with a comma", with("dataPool", "ec,ro"), "dataPool", nil},
		{"data pool as a dot file", with("dataPool", ".ec"), "dataPool", nil},
		{"namespace as an option", with("radosNamespace", "-n"), "radosNamespace", nil},
		// ceph-csi's StorageClass keys: accepted where they agree, refused naming the feature
		{"ceph-csi krbd", with("mounter", "rbd", "tryOtherMounters", "true"), "", func(t *testing.T, v volumeParams) {
			if v.Mounter != "krbd" || !v.TryOtherMounters {
				t.Errorf("ceph-csi's mounter rbd and tryOtherMounters: %+v", v)
			}
		}},
		{"ceph-csi class as written", with("imageFormat", "2", "imageFeatures", "layering", "volumeNamePrefix", "csi-vol-", "encrypted", "false",
			"encryptionKMSID", "vault", "thickProvision", "false", "cephLogDir", "/var/log/ceph", "cephLogStrategy", "remove",
			"mapOptions", "", "mkfsOptions", "", "csi.storage.k8s.io/provisioner-secret-name", "csi-rbd-secret"), "", nil},
		{"encrypted", with("encrypted", "true", "encryptionKMSID", "meta", "encryptionType", "block"), "", func(t *testing.T, v volumeParams) {
			if !v.Encrypted || v.KMSID != "meta" || v.Mounter != "fuse" {
				t.Errorf("an encrypted class goes to the fuse mounter with its KMS: %+v", v)
			}
		}},
		{"encrypted on fuse", with("encrypted", "true", "mounter", "fuse"), "", nil},
		{"KMS of an unencrypted class", with("encrypted", "false", "encryptionKMSID", "meta"), "", func(t *testing.T, v volumeParams) {
			if v.Encrypted || v.KMSID != "" || v.Mounter != "krbd" {
				t.Errorf("ceph-csi ignores encryptionKMSID without encryption: %+v", v)
			}
		}},
		{"encrypted on krbd", with("encrypted", "true", "mounter", "krbd"), "mounter", nil},
		{"encrypted on ceph-csi's rbd", with("encrypted", "true", "mounter", "rbd"), "mounter", nil},
		{"encrypted on rbd-nbd", with("encrypted", "true", "mounter", "rbd-nbd"), "mounter", nil},
		{"encrypted with fallbacks", with("encrypted", "true", "tryOtherMounters", "true"), "tryOtherMounters", nil},
		{"file encryption", with("encrypted", "true", "encryptionType", "file"), "encryptionType", nil},
		{"file encryption of an unencrypted class", with("encrypted", "false", "encryptionType", "file"), "", nil},
		{"file encryption without encrypted", with("encryptionType", "file"), "", nil},
		{"encrypted garbage", with("encrypted", "yes please"), "encrypted", nil},
		{"thick provisioning", with("thickProvision", "true"), "thickProvision", nil},
		{"image format 1", with("imageFormat", "1"), "imageFormat", nil},
		{"name prefix", with("volumeNamePrefix", "k8s-"), "volumeNamePrefix", nil},
		{"map options", with("mapOptions", "krbd:lock_on_read"), "mapOptions", nil},
		{"mkfs options", with("mkfsOptions", "-m0"), "mkfsOptions", nil},
		{"striping", with("stripeUnit", "65536", "stripeCount", "4"), "stripeCount", nil},
		{"topology without pools", with("topologyConstrainedPools", "[]"), "topologyConstrainedPools", nil},
		{"QoS", with("maxIops", "100"), "maxIops", nil},
		{"bad tryOtherMounters", with("tryOtherMounters", "maybe"), "tryOtherMounters", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := parseVolumeParams(tt.in)
			if tt.name == "unknown key" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"imagefeatures"`) {
					t.Fatalf("err = %v, want INVALID_ARGUMENT naming the key", err)
				}
				return
			}
			if tt.errField == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if tt.check != nil {
					tt.check(t, v)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `parameters["`+tt.errField+`"]`) {
				t.Fatalf("err = %v, want INVALID_ARGUMENT naming parameters[%q]", err, tt.errField)
			}
		})
	}
}

func TestValidateCreate(t *testing.T) {
	mount := []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}
	params := map[string]string{"clusterID": "c", "pool": "rbd"}
	snapOn := func(cluster string) *csi.VolumeContentSource {
		id := volid.RBDSnapshot{RBDVolume: volid.RBDVolume{ClusterID: cluster, PoolID: 2, UID: "aaaaaaaaaaaaaaaa"}, SnapUID: "bbbbbbbbbbbbbbbb"}
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id.String()}}}
	}
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		code codes.Code
		size int64
	}{
		{"default size", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mount, Parameters: params}, codes.OK, 1 << 30},
		{"limit only", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mount, Parameters: params,
			CapacityRange: &csi.CapacityRange{LimitBytes: 1 << 20}}, codes.OK, 1 << 20},
		{"no name", &csi.CreateVolumeRequest{VolumeCapabilities: mount, Parameters: params}, codes.InvalidArgument, 0},
		{"no capabilities", &csi.CreateVolumeRequest{Name: "v", Parameters: params}, codes.InvalidArgument, 0},
		{"negative size", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mount, Parameters: params,
			CapacityRange: &csi.CapacityRange{RequiredBytes: -1}}, codes.InvalidArgument, 0},
		{"limit below required", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mount, Parameters: params,
			CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20, LimitBytes: 1 << 20}}, codes.InvalidArgument, 0},
		{"source on another cluster", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mount, Parameters: params,
			VolumeContentSource: snapOn("other")}, codes.InvalidArgument, 0},
		{"malformed source", &csi.CreateVolumeRequest{Name: "v", VolumeCapabilities: mount, Parameters: params,
			VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "-oX"}}}},
			codes.NotFound, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := validateCreate(tt.req, 1<<30)
			if status.Code(err) != tt.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if err == nil && r.size != tt.size {
				t.Fatalf("size = %d, want %d", r.size, tt.size)
			}
		})
	}
}

func TestCompatible(t *testing.T) {
	rec := &journal.Record{UID: "aaaaaaaaaaaaaaaa", Name: "v", Attrs: map[string]string{attrSize: "8388608", attrSource: ""}}
	req := func(required, limit int64) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit}}
	}
	snap := source{Snap: &snapshotID{Own: volid.RBDSnapshot{RBDVolume: volid.RBDVolume{ClusterID: "c", PoolID: 2, UID: "cccccccccccccccc"}, SnapUID: "dddddddddddddddd"}}}
	tests := []struct {
		name string
		req  *csi.CreateVolumeRequest
		src  source
		code codes.Code
	}{
		{"same request", req(8<<20, 0), source{}, codes.OK},
		{"smaller required fits", req(4<<20, 0), source{}, codes.OK},
		{"larger required", req(16<<20, 0), source{}, codes.AlreadyExists},
		{"limit below size", req(0, 4<<20), source{}, codes.AlreadyExists},
		{"other source", req(8<<20, 0), snap, codes.AlreadyExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size, err := compatible(rec, tt.req, tt.src, nil)
			if status.Code(err) != tt.code {
				t.Fatalf("code = %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if err == nil && size != 8<<20 {
				t.Fatalf("size = %d, want the reservation's", size)
			}
		})
	}
	broken := &journal.Record{UID: "aaaaaaaaaaaaaaaa", Name: "v", Attrs: map[string]string{attrSize: "x"}}
	if _, err := compatible(broken, req(1, 0), source{}, nil); status.Code(err) != codes.Internal {
		t.Fatalf("a reservation without a valid size: %v, want INTERNAL", err)
	}
}

func TestSourceImage(t *testing.T) {
	vol := volid.RBDVolume{ClusterID: "c", PoolID: 7, Namespace: "ns", UID: "aaaaaaaaaaaaaaaa"}
	snap := volid.RBDSnapshot{RBDVolume: vol, SnapUID: "bbbbbbbbbbbbbbbb"}
	const csiSnap = "0001-0002-c1-0000000000000007-c050fde3-2a93-4a45-900c-96bcc96c6b40"
	tests := []struct {
		attr, origin string
		want         *trashedImage
	}{
		{"", "", nil},
		{"volume:" + vol.String(), "", &trashedImage{poolID: 7, ns: "ns", name: "csi-vol-aaaaaaaaaaaaaaaa"}},
		{"snapshot:" + snap.String(), "", &trashedImage{poolID: 7, ns: "ns", name: "csi-vol-aaaaaaaaaaaaaaaa"}},
		{"volume:garbage", "", nil},
		{"snapshot:" + vol.String(), "", nil}, // a volume ID where a snapshot ID belongs
		{"image:" + vol.String(), "", nil},
		// a ceph-csi source: the image recorded at clone time (its journal entry may be gone)
		{"snapshot:" + csiSnap, "7/k8s/csi-snap-c050fde3-2a93-4a45-900c-96bcc96c6b40",
			&trashedImage{poolID: 7, ns: "k8s", name: "csi-snap-c050fde3-2a93-4a45-900c-96bcc96c6b40"}},
		{"snapshot:" + csiSnap, "7", nil},
	}
	for _, tt := range tests {
		got := sourceImage(tt.attr, tt.origin)
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("sourceImage(%q) = %+v, want %+v", tt.attr, got, tt.want)
		}
	}
}
