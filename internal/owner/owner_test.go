package owner

import (
	"maps"
	"testing"
)

func TestFromParams(t *testing.T) {
	params := map[string]string{PVName: "pv-1", PVCName: "data", PVCNamespace: "", "pool": "rbd", SnapshotName: "s"}
	for _, tc := range []struct {
		name    string
		keys    []string
		cluster string
		want    Keys
	}{
		{"volume with cluster", VolumeKeys, "prod", Keys{PVName: "pv-1", PVCName: "data", ClusterName: "prod"}},
		{"volume without cluster", VolumeKeys, "", Keys{PVName: "pv-1", PVCName: "data"}},
		{"snapshot", SnapshotKeys, "prod", Keys{SnapshotName: "s", ClusterName: "prod"}},
		{"nothing", SnapshotKeys[1:], "", Keys{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := FromParams(params, tc.keys, tc.cluster); !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWrites(t *testing.T) {
	for _, tc := range []struct {
		name       string
		have, want Keys
		overwrite  bool
		writes     Keys
	}{
		{"all missing", Keys{}, Keys{PVName: "a", ClusterName: "c"}, false, Keys{PVName: "a", ClusterName: "c"}},
		{"already there", Keys{PVName: "a"}, Keys{PVName: "a"}, true, Keys{}},
		{"create replaces a stale value", Keys{PVName: "old"}, Keys{PVName: "a"}, true, Keys{PVName: "a"}},
		{"backfill keeps ceph-csi's value", Keys{PVName: "old"}, Keys{PVName: "a", PVCName: "p"}, false, Keys{PVCName: "p"}},
		{"other keys are never removed", Keys{"x": "1"}, Keys{}, true, Keys{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Writes(tc.have, tc.want, tc.overwrite); !maps.Equal(got, tc.writes) {
				t.Fatalf("got %v, want %v", got, tc.writes)
			}
		})
	}
}
