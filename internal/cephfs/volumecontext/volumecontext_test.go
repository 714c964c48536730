package volumecontext

import (
	"maps"
	"path"
	"strings"
	"testing"
)

const root = "/volumes/csi/csi-vol-abcdefghijklmnop/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"

func valid() map[string]string {
	return map[string]string{ClusterID: "local", FSName: "myfs", RootPath: root, Mounter: MounterFuse}
}

// with is the valid context with key set to value ("" removes the key).
func with(key, value string, more ...string) map[string]string {
	m := valid()
	kv := append([]string{key, value}, more...)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(m, kv[i])
		} else {
			m[kv[i]] = kv[i+1]
		}
	}
	return m
}

func TestParse(t *testing.T) {
	base := Volume{ClusterID: "local", FSName: "myfs", RootPath: root, Mounter: MounterFuse}
	edit := func(f func(*Volume)) Volume { v := base; f(&v); return v }
	tests := []struct {
		name string
		ctx  map[string]string
		want Volume
		msg  string // "" for success
	}{
		{name: "complete", ctx: valid(), want: base},
		{name: "node chooses the mounter", ctx: with(Mounter, ""), want: edit(func(v *Volume) { v.Mounter = "" })},
		{name: "kernel with options", ctx: with(Mounter, MounterKernel, KernelMountOptions, "noatime"),
			want: edit(func(v *Volume) { v.Mounter, v.KernelMountOptions = MounterKernel, "noatime" })},
		{name: "shallow", ctx: with(Shallow, "true", SnapshotName, "csi-snap-abcdefghijklmnop"),
			want: edit(func(v *Volume) { v.Shallow, v.SnapshotName = true, "csi-snap-abcdefghijklmnop" })},
		{name: "not shallow", ctx: with(Shallow, "false"), want: base},
		{name: "pre-provisioned root", ctx: with(RootPath, "/exports/team_a"), want: edit(func(v *Volume) { v.RootPath = "/exports/team_a" })},
		{name: "filesystem root", ctx: with(RootPath, "/"), want: edit(func(v *Volume) { v.RootPath = "/" })},

		// ceph-csi's contexts: the subvolume path names the root; a shallow volume's names the
		// subvolume's base directory, with a trailing slash
		{name: "ceph-csi volume", ctx: with(RootPath, "", CephCSISubvolumePath, root, CephCSISubvolumeName, "csi-vol-abcdefghijklmnop"), want: base},
		{name: "ceph-csi shallow volume", ctx: with(RootPath, "", CephCSISubvolumePath, "/volumes/csi/csi-vol-abcdefghijklmnop/", CephCSISubvolumeName, "csi-vol-qrstuvwxyzabcdef"),
			want: edit(func(v *Volume) { v.RootPath, v.CephCSIShallow = "/volumes/csi/csi-vol-abcdefghijklmnop", true })},
		{name: "ceph-csi encrypted", ctx: with(Encrypted, "true"), want: edit(func(v *Volume) { v.Encrypted = true })},
		{name: "ceph-csi path escaping", ctx: with(RootPath, "", CephCSISubvolumePath, "/volumes/../etc/"), msg: `volume_context["rootPath"] = "/volumes/../etc": want a clean absolute path`},
		{name: "ceph-csi encrypted not a bool", ctx: with(Encrypted, "maybe"), msg: `volume_context["encrypted"] = "maybe": want true or false`},

		// missing keys, in order
		{name: "empty", ctx: map[string]string{}, msg: `volume_context["clusterID"] is missing`},
		{name: "nil", ctx: nil, msg: `volume_context["clusterID"] is missing`},
		{name: "no fsName", ctx: with(FSName, ""), msg: `volume_context["fsName"] is missing`},
		{name: "no rootPath", ctx: with(RootPath, ""), msg: `volume_context["rootPath"] is missing`},
		{name: "fsName before rootPath", ctx: map[string]string{ClusterID: "c"}, msg: `volume_context["fsName"] is missing`},
		{name: "shallow without snapshot", ctx: with(Shallow, "true"), msg: `volume_context["snapshotName"] is missing`},

		// injection attempts: an option to ceph-fuse, a second kernel mount option, a path
		{name: "fsName as an option", ctx: with(FSName, "-oX"), msg: `volume_context["fsName"] = "-oX": want`},
		{name: "fsName with a mount option", ctx: with(FSName, "myfs,secretfile=/etc/shadow"), msg: `volume_context["fsName"] = "myfs,secretfile=/etc/shadow": want`},
		{name: "rootPath relative", ctx: with(RootPath, "volumes/x"), msg: `volume_context["rootPath"] = "volumes/x": want a clean absolute path`},
		{name: "rootPath escaping", ctx: with(RootPath, "/volumes/../../../dev/sda"), msg: `want a clean absolute path`},
		{name: "rootPath as an option", ctx: with(RootPath, "-oX"), msg: `volume_context["rootPath"] = "-oX": want a clean absolute path`},
		{name: "rootPath in a snapshot", ctx: with(RootPath, "/volumes/x/.snap/s"), msg: `component ".snap"`},
		{name: "rootPath with a mount option", ctx: with(RootPath, "/volumes/a,ro"), msg: `component "a,ro"`},
		{name: "rootPath with blanks", ctx: with(RootPath, "/volumes/a b"), msg: `component "a b"`},
		{name: "rootPath with a newline", ctx: with(RootPath, "/volumes/a\n-oX"), msg: `volume_context["rootPath"]`},
		{name: "snapshot walking out of .snap", ctx: with(Shallow, "true", SnapshotName, ".."), msg: `volume_context["snapshotName"] = "..": want`},
		{name: "snapshot as a path", ctx: with(Shallow, "true", SnapshotName, "../../../dev/sda"), msg: `volume_context["snapshotName"] = "../../../dev/sda": want`},
		{name: "snapshot of a non-shallow volume", ctx: with(SnapshotName, "-oX"), msg: `volume_context["snapshotName"] = "-oX": want`},
		{name: "clusterID with a slash", ctx: with(ClusterID, "a/b"), msg: `volume_context["clusterID"] = "a/b": want`},
		{name: "unknown mounter", ctx: with(Mounter, "nfs"), msg: `volume_context["mounter"] = "nfs": want fuse or kernel`},
		{name: "shallow not a bool", ctx: with(Shallow, "yes"), msg: `volume_context["shallow"] = "yes": want true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.ctx)
			if tt.msg != "" {
				if err == nil || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("Parse = %+v, %v; want an error containing %q", got, err, tt.msg)
				}
				if got != (Volume{}) {
					t.Fatalf("Parse returned %+v with its error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// Map and Parse are the two ends of the contract: what the controller writes the node reads
// back unchanged, and Map leaves out what is unset.
func TestMapRoundTrip(t *testing.T) {
	for _, v := range []Volume{
		{ClusterID: "local", FSName: "myfs", RootPath: root},
		{ClusterID: "local", FSName: "myfs", RootPath: root, Mounter: MounterKernel, KernelMountOptions: "noatime,ms_mode=secure"},
		{ClusterID: "local", FSName: "myfs", RootPath: root, Mounter: MounterFuse, FuseMountOptions: "--client_cache_size=1000", Shallow: true, SnapshotName: "snap"},
	} {
		m := v.Map()
		got, err := Parse(m)
		if err != nil || got != v {
			t.Fatalf("Parse(%v) = %+v, %v; want %+v", m, got, err, v)
		}
		for k, val := range m {
			if val == "" {
				t.Fatalf("Map wrote the empty key %q", k)
			}
		}
	}
	if _, ok := (Volume{ClusterID: "c", FSName: "f", RootPath: "/"}).Map()[Shallow]; ok {
		t.Fatal("Map wrote shallow for a regular volume")
	}
}

// FuzzParse feeds Parse arbitrary values for every key. Whatever it accepts must be safe to
// use as the node uses it: no name starts an option or holds a separator, the root path is
// clean and absolute and never inside a snapshot, the snapshot directory stays inside .snap,
// and the context round-trips through Map.
func FuzzParse(f *testing.F) {
	for _, c := range []map[string]string{
		valid(), with(FSName, "-oX"), with(RootPath, "/volumes/../../../dev/sda"),
		with(Shallow, "true", SnapshotName, ".."), with(Shallow, "true", SnapshotName, "snap", Mounter, MounterKernel),
	} {
		f.Add(c[ClusterID], c[FSName], c[RootPath], c[Mounter], c[Shallow], c[SnapshotName])
	}
	f.Fuzz(func(t *testing.T, cluster, fsName, rootPath, mounter, shallow, snapshot string) {
		ctx := map[string]string{ClusterID: cluster, FSName: fsName, RootPath: rootPath, Mounter: mounter, Shallow: shallow, SnapshotName: snapshot}
		v, err := Parse(maps.Clone(ctx))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "volume_context[") {
				t.Fatalf("error %q does not name the key", err)
			}
			return
		}
		unsafe := func(s string) bool {
			return strings.HasPrefix(s, "-") || strings.HasPrefix(s, ".") || strings.ContainsAny(s, ",/=@ \t\n\x00")
		}
		if unsafe(v.ClusterID) || unsafe(v.FSName) || v.SnapshotName != "" && unsafe(v.SnapshotName) {
			t.Fatalf("Parse accepted an unsafe name in %+v", v)
		}
		if !strings.HasPrefix(v.RootPath, "/") || path.Clean(v.RootPath) != v.RootPath || strings.Contains(v.RootPath, "/.") ||
			strings.ContainsAny(v.RootPath, ", \t\n\x00") {
			t.Fatalf("Parse accepted the root path %q", v.RootPath)
		}
		if v.Shallow {
			if dir := path.Join(".snap", v.SnapshotName); path.Dir(dir) != ".snap" {
				t.Fatalf("snapshot %q names %s, outside .snap", v.SnapshotName, dir)
			}
		}
		again, err := Parse(v.Map())
		if err != nil || again != v {
			t.Fatalf("round trip: Parse(Map(%+v)) = %+v, %v", v, again, err)
		}
	})
}
