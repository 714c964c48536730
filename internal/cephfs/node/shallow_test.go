package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestVolumeLayout(t *testing.T) {
	const uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	tests := []struct {
		name string
		vol  volumecontext.Volume
		want layout
	}{
		{name: "regular", vol: volumecontext.Volume{RootPath: "/volumes/csi/sub/" + uuid},
			want: layout{mountedPath: "/volumes/csi/sub/" + uuid}},
		{name: "shallow of a driver subvolume mounts the parent", vol: volumecontext.Volume{RootPath: "/volumes/csi/sub/" + uuid, Shallow: true, SnapshotName: "snap"},
			want: layout{mountedPath: "/volumes/csi/sub", snapshotDir: ".snap/snap/" + uuid}},
		{name: "shallow of the default group", vol: volumecontext.Volume{RootPath: "/volumes/_nogroup/sub/" + uuid, Shallow: true, SnapshotName: "snap"},
			want: layout{mountedPath: "/volumes/_nogroup/sub", snapshotDir: ".snap/snap/" + uuid}},
		{name: "pre-provisioned: not a uuid", vol: volumecontext.Volume{RootPath: "/volumes/csi/sub/data", Shallow: true, SnapshotName: "snap"},
			want: layout{mountedPath: "/volumes/csi/sub/data", snapshotDir: ".snap/snap", inherited: true}},
		{name: "pre-provisioned: deeper", vol: volumecontext.Volume{RootPath: "/volumes/csi/sub/" + uuid + "/data", Shallow: true, SnapshotName: "snap"},
			want: layout{mountedPath: "/volumes/csi/sub/" + uuid + "/data", snapshotDir: ".snap/snap", inherited: true}},
		{name: "pre-provisioned: elsewhere", vol: volumecontext.Volume{RootPath: "/exports/x", Shallow: true, SnapshotName: "snap"},
			want: layout{mountedPath: "/exports/x", snapshotDir: ".snap/snap", inherited: true}},
		{name: "pre-provisioned: upper-case uuid is not the driver's", vol: volumecontext.Volume{RootPath: "/volumes/csi/sub/0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", Shallow: true, SnapshotName: "s"},
			want: layout{mountedPath: "/volumes/csi/sub/0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0", snapshotDir: ".snap/s", inherited: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := volumeLayout(tt.vol); got != tt.want {
				t.Fatalf("volumeLayout = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestResolveSnapshotDir(t *testing.T) {
	const uuid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	driver := layout{mountedPath: "/volumes/csi/sub", snapshotDir: ".snap/snap/" + uuid}
	preprov := layout{mountedPath: "/x", snapshotDir: ".snap/snap", inherited: true}
	tests := []struct {
		name string
		dirs []string // under the staging path
		l    layout
		want string
		code codes.Code
		msg  string
	}{
		{name: "driver subvolume", dirs: []string{".snap/snap/" + uuid}, l: driver, want: ".snap/snap/" + uuid},
		{name: "driver: no snapshot", dirs: []string{".snap/other/" + uuid}, l: driver, code: codes.NotFound, msg: `snapshot "snap" does not exist`},
		{name: "driver: no .snap at all", l: driver, code: codes.NotFound, msg: `snapshot "snap" does not exist`},
		{name: "driver: snapshot without the subvolume", dirs: []string{".snap/snap/11111111-2222-3333-4444-555555555555"}, l: driver,
			code: codes.NotFound, msg: "11111111-2222-3333-4444-555555555555"},
		{name: "pre-provisioned: own snapshot", dirs: []string{".snap/snap", ".snap/_snap_1099511627776"}, l: preprov, want: ".snap/snap"},
		{name: "pre-provisioned: inherited snapshot", dirs: []string{".snap/_snap_1099511627776", ".snap/_snapx_1", ".snap/_snap_"}, l: preprov, want: ".snap/_snap_1099511627776"},
		{name: "pre-provisioned: ambiguous", dirs: []string{".snap/_snap_1099511627776", ".snap/_snap_1099511627777"}, l: preprov,
			code: codes.InvalidArgument, msg: "ambiguous"},
		{name: "pre-provisioned: missing", dirs: []string{".snap/_other_1"}, l: preprov, code: codes.NotFound, msg: `snapshot "snap" does not exist`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			staging := t.TempDir()
			for _, d := range tt.dirs {
				if err := os.MkdirAll(filepath.Join(staging, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			got, err := resolveSnapshotDir(staging, tt.l, "snap")
			if tt.code != codes.OK {
				wantCode(t, err, tt.code, tt.msg)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("resolveSnapshotDir = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestResolveCephCSIShallowName: the snapshot name read from ceph-csi's journal (an omap value)
// is joined into the path bound into pods, so one that is not a plain Ceph name is refused.
func TestResolveCephCSIShallowName(t *testing.T) {
	for _, c := range []struct {
		snap string
		want codes.Code
	}{
		{"csi-snap-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", codes.OK},
		{"../../../../etc", codes.FailedPrecondition},
		{"a/b", codes.FailedPrecondition},
		{"", codes.FailedPrecondition},
		{".", codes.FailedPrecondition},
	} {
		s := &Server{opts: Options{ResolveCephCSIShallow: func(context.Context, string, string, ceph.Credentials) (string, error) { return c.snap, nil }}}
		r := &stageRequest{volumeID: "0001-0009-rook-ceph-0000000000000001-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"}
		err := s.resolveCephCSIShallow(context.Background(), r, nil)
		if status.Code(err) != c.want || c.want == codes.OK && r.vol.SnapshotName != c.snap {
			t.Errorf("snapshot %q: %v (name %q), want %v", c.snap, err, r.vol.SnapshotName, c.want)
		}
	}
}
