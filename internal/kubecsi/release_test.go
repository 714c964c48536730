package kubecsi

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestCheckOwner: the upgrade hook replaces only objects of the release it runs for (issue 26,
// item 7); refusals name the owner found.
func TestCheckOwner(t *testing.T) {
	rel := Release{Namespace: "storage", Name: "monoceph"}
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        string // "": accepted; else a part of the error
	}{
		{"the release's", map[string]string{helmReleaseName: "monoceph", helmReleaseNamespace: "storage"}, ""},
		{"same name, other namespace", map[string]string{helmReleaseName: "monoceph", helmReleaseNamespace: "other"}, "Helm release other/monoceph"},
		{"other release, same namespace", map[string]string{helmReleaseName: "ceph-csi", helmReleaseNamespace: "storage"}, "Helm release storage/ceph-csi"},
		{"name only", map[string]string{helmReleaseName: "monoceph"}, "Helm release /monoceph"},
		{"no annotations", nil, "no Helm release"},
		{"unrelated annotations", map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}, "no Helm release"},
	} {
		o := &unstructured.Unstructured{Object: map[string]any{"kind": "StorageClass", "metadata": map[string]any{"name": "fast"}}}
		o.SetAnnotations(c.annotations)
		err := CheckOwner(o, rel)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "StorageClass fast")):
			t.Errorf("%s: %v; want an error naming StorageClass fast and %s", c.name, err, c.want)
		}
	}
}

func TestParseRelease(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"storage/monoceph", true}, {"monoceph", false}, {"/monoceph", false}, {"storage/", false}, {"a/b/c", false}, {"", false},
	} {
		r, err := ParseRelease(c.in)
		if (err == nil) != c.ok || c.ok && r.String() != c.in {
			t.Errorf("ParseRelease(%q) = %v, %v; want ok %v", c.in, r, err, c.ok)
		}
	}
}
