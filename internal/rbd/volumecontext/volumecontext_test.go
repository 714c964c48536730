package volumecontext

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"
)

func valid() map[string]string {
	return map[string]string{ClusterID: "local", Pool: "rbd", RadosNamespace: "k8s", ImageName: "csi-vol-abcdefghijklmnop", Mounter: MounterFuse}
}

// with is the valid context with key set to value ("" removes the key).
func with(key, value string) map[string]string {
	m := valid()
	if value == "" {
		delete(m, key)
	} else {
		m[key] = value
	}
	return m
}

func withAll(kv ...string) map[string]string {
	m := valid()
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		ctx  map[string]string
		want Image
		msg  string // "" for success
	}{
		{name: "complete", ctx: valid(), want: Image{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "csi-vol-abcdefghijklmnop", Mounter: MounterFuse}},
		{name: "default namespace and mounter", ctx: map[string]string{ClusterID: "c", Pool: "p", ImageName: "i"}, want: Image{ClusterID: "c", Pool: "p", Name: "i", Mounter: MounterKRBD}},
		{name: "rbd-nbd", ctx: with(Mounter, MounterNBD), want: Image{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "csi-vol-abcdefghijklmnop", Mounter: MounterNBD}},
		{name: "pre-provisioned image name", ctx: with(ImageName, "Legacy_Image.v2"), want: Image{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "Legacy_Image.v2", Mounter: MounterFuse}},

		// missing keys, named in the order of the volume's address: cluster, pool, image
		// ceph-csi's contexts: its mounter "rbd" is krbd; tryOtherMounters; encrypted
		{name: "ceph-csi krbd", ctx: map[string]string{ClusterID: "local", Pool: "rbd", RadosNamespace: "k8s", ImageName: "csi-vol-abcdefghijklmnop",
			Mounter: MounterCephCSIKRBD, TryOtherMounters: "true", Encrypted: "false"},
			want: Image{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "csi-vol-abcdefghijklmnop", Mounter: MounterKRBD, TryOtherMounters: true}},
		{name: "ceph-csi encrypted", ctx: with(Encrypted, "true"),
			want: Image{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "csi-vol-abcdefghijklmnop", Mounter: MounterFuse, Encrypted: true}},
		{name: "monoceph encrypted", ctx: withAll(Encrypted, "true", EncryptionEngine, EngineLibrbd, EncryptionKMSID, "meta"),
			want: Image{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "csi-vol-abcdefghijklmnop", Mounter: MounterFuse, Encrypted: true, Librbd: true, KMSID: "meta"}},
		{name: "librbd encryption, not encrypted", ctx: with(EncryptionEngine, EngineLibrbd), msg: `volume_context["encryptionEngine"] = "librbd" needs volume_context["encrypted"] = "true"`},
		{name: "librbd encryption on krbd", ctx: withAll(Encrypted, "true", EncryptionEngine, EngineLibrbd, Mounter, MounterKRBD), msg: `needs the fuse mounter, not krbd`},
		{name: "librbd encryption with fallbacks", ctx: withAll(Encrypted, "true", EncryptionEngine, EngineLibrbd, TryOtherMounters, "true"), msg: `tryOtherMounters true`},
		{name: "unknown engine", ctx: withAll(Encrypted, "true", EncryptionEngine, "dm-crypt"), msg: `volume_context["encryptionEngine"] = "dm-crypt": want librbd`},
		{name: "tryOtherMounters not a bool", ctx: with(TryOtherMounters, "sometimes"), msg: `volume_context["tryOtherMounters"] = "sometimes": want true or false`},
		{name: "empty", ctx: map[string]string{}, msg: `volume_context["clusterID"] is missing`},
		{name: "nil", ctx: nil, msg: `volume_context["clusterID"] is missing`},
		{name: "no clusterID", ctx: with(ClusterID, ""), msg: `volume_context["clusterID"] is missing`},
		{name: "no pool", ctx: with(Pool, ""), msg: `volume_context["pool"] is missing`},
		{name: "no image", ctx: with(ImageName, ""), msg: `volume_context["imageName"] is missing`},
		{name: "pool before image", ctx: map[string]string{ClusterID: "c"}, msg: `volume_context["pool"] is missing`},

		// injection attempts: an option to rbd or rbd-fuse, a second mount option, a path
		{name: "pool as an option", ctx: with(Pool, "-oX"), msg: `volume_context["pool"] = "-oX": want`},
		{name: "pool as a long option", ctx: with(Pool, "--keyfile=/etc/shadow"), msg: `volume_context["pool"] = "--keyfile=/etc/shadow": want`},
		{name: "namespace as an option", ctx: with(RadosNamespace, "-oX"), msg: `volume_context["radosNamespace"] = "-oX": want`},
		{name: "namespace with a slash", ctx: with(RadosNamespace, "a/b"), msg: `volume_context["radosNamespace"] = "a/b": want`},
		{name: "namespace dot dot", ctx: with(RadosNamespace, ".."), msg: `volume_context["radosNamespace"] = "..": want`},
		{name: "image as a path", ctx: with(ImageName, "../../../dev/sda"), msg: `volume_context["imageName"] = "../../../dev/sda": want`},
		{name: "image dot dot", ctx: with(ImageName, ".."), msg: `volume_context["imageName"] = "..": want`},
		{name: "image as an option", ctx: with(ImageName, "-oX"), msg: `volume_context["imageName"] = "-oX": want`},
		{name: "image with a mount option", ctx: with(ImageName, "img,allow_other"), msg: `volume_context["imageName"] = "img,allow_other": want`},
		{name: "image with a snapshot", ctx: with(ImageName, "img@snap"), msg: `volume_context["imageName"] = "img@snap": want`},
		{name: "image with a newline", ctx: with(ImageName, "img\n-oX"), msg: `volume_context["imageName"] = "img\n-oX": want`},
		{name: "image too long", ctx: with(ImageName, strings.Repeat("i", 256)), msg: `volume_context["imageName"] = "iii`},
		{name: "clusterID with blanks", ctx: with(ClusterID, "a b"), msg: `volume_context["clusterID"] = "a b": want`},
		{name: "unknown mounter", ctx: with(Mounter, "nfs"), msg: `volume_context["mounter"] = "nfs": want krbd, rbd-nbd or fuse`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.ctx)
			if tt.msg != "" {
				if err == nil || !strings.Contains(err.Error(), tt.msg) {
					t.Fatalf("Parse = %+v, %v; want an error containing %q", got, err, tt.msg)
				}
				if got != (Image{}) {
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
// back unchanged.
func TestMapRoundTrip(t *testing.T) {
	for _, img := range []Image{
		{ClusterID: "local", Pool: "rbd", Namespace: "k8s", Name: "csi-vol-x", Mounter: MounterFuse},
		{ClusterID: "local", Pool: "rbd", Name: "csi-vol-y", Mounter: MounterKRBD},
		{ClusterID: "local", Pool: "rbd", Name: "csi-vol-z", Mounter: MounterFuse, Encrypted: true, Librbd: true, KMSID: "meta"},
		{ClusterID: "local", Pool: "rbd", Name: "csi-vol-w", Mounter: MounterFuse, Encrypted: true, Librbd: true},
	} {
		got, err := Parse(img.Map())
		if err != nil || got != img {
			t.Fatalf("Parse(%v) = %+v, %v; want %+v", img.Map(), got, err, img)
		}
	}
}

func TestValidMounter(t *testing.T) {
	for m, want := range map[string]bool{MounterKRBD: true, MounterNBD: true, MounterFuse: true, "": false, "nbd": false, "Fuse": false} {
		if ValidMounter(m) != want {
			t.Errorf("ValidMounter(%q) = %v", m, !want)
		}
	}
}

// FuzzParse feeds Parse arbitrary values for every key. Whatever it accepts must be safe to
// use as the node uses it: no name starts an option or holds a separator, the image file
// rbd-fuse shows stays inside its mount point, and the context round-trips through Map.
func FuzzParse(f *testing.F) {
	for _, c := range []map[string]string{valid(), with(Pool, "-oX"), with(ImageName, "../../../dev/sda"), with(RadosNamespace, ""), with(Mounter, "")} {
		f.Add(c[ClusterID], c[Pool], c[RadosNamespace], c[ImageName], c[Mounter])
	}
	f.Fuzz(func(t *testing.T, cluster, pool, ns, image, mounter string) {
		ctx := map[string]string{ClusterID: cluster, Pool: pool, RadosNamespace: ns, ImageName: image, Mounter: mounter}
		img, err := Parse(maps.Clone(ctx))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "volume_context[") {
				t.Fatalf("error %q does not name the key", err)
			}
			return
		}
		for _, name := range []string{img.ClusterID, img.Pool, img.Namespace, img.Name} {
			if strings.HasPrefix(name, "-") || strings.HasPrefix(name, ".") || strings.ContainsAny(name, ",/=@ \t\n\x00") {
				t.Fatalf("Parse accepted the unsafe name %q", name)
			}
		}
		const dir = "/run/monoceph/work/rbd-fuse"
		if file := filepath.Join(dir, img.Name); filepath.Dir(file) != dir {
			t.Fatalf("image %q names the file %s outside %s", img.Name, file, dir)
		}
		if !ValidMounter(img.Mounter) {
			t.Fatalf("Parse accepted mounter %q", img.Mounter)
		}
		again, err := Parse(img.Map())
		if err != nil || again != img {
			t.Fatalf("round trip: Parse(Map(%+v)) = %+v, %v", img, again, err)
		}
	})
}
