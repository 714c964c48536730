package snapmeta

import (
	"strings"
	"testing"
)

// The cases follow external-snapshotter's own tests of GetSecretReference for snapshotter
// secrets (pkg/utils), which the snapshot controller and the snapshot metadata sidecar share.
func TestSnapshotterSecret(t *testing.T) {
	const content, ns, name = "snapcontent-0123", "backups", "db-snap"
	p := func(nameTmpl, nsTmpl string) map[string]string {
		return map[string]string{paramSecretName: nameTmpl, paramSecretNamespace: nsTmpl, "other": "x"}
	}
	tests := []struct {
		name   string
		params map[string]string
		want   secretRef
		ok     bool
		err    string // substring of the error; "" for none
	}{
		{name: "no secret parameters", params: map[string]string{"other": "x"}},
		{name: "literal", params: p("ceph-user", "monoceph"), want: secretRef{"monoceph", "ceph-user"}, ok: true},
		{name: "namespace of the snapshot", params: p("ceph-user", "${volumesnapshot.namespace}"), want: secretRef{ns, "ceph-user"}, ok: true},
		{name: "name of the snapshot", params: p("${volumesnapshot.name}-creds", "monoceph"), want: secretRef{"monoceph", name + "-creds"}, ok: true},
		{name: "every token", params: p("${volumesnapshotcontent.name}.${volumesnapshot.namespace}.${volumesnapshot.name}", "${volumesnapshotcontent.name}"),
			want: secretRef{content, content + "." + ns + "." + name}, ok: true},
		{name: "token without braces", params: p("$volumesnapshot", "monoceph"), err: `unknown tokens ["volumesnapshot"]`},
		{name: "snapshot name not allowed in the namespace", params: p("ceph-user", "${volumesnapshot.name}"), err: `unknown tokens ["volumesnapshot.name"]`},
		{name: "PVC tokens belong to the provisioner", params: p("${pvc.name}", "monoceph"), err: `unknown tokens ["pvc.name"]`},
		{name: "name without namespace", params: map[string]string{paramSecretName: "ceph-user"}, err: "go together"},
		{name: "namespace without name", params: map[string]string{paramSecretNamespace: "monoceph"}, err: "go together"},
		{name: "empty name", params: p("", "monoceph"), err: "must not be empty"},
		{name: "empty namespace", params: p("ceph-user", ""), err: "must not be empty"},
		{name: "invalid resolved namespace", params: p("ceph-user", "${volumesnapshotcontent.name}.x"), err: "not a namespace name"},
		{name: "invalid name", params: p("Ceph_User", "monoceph"), err: "not a Secret name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := snapshotterSecret(tt.params, content, ns, name)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			case got != tt.want || ok != tt.ok:
				t.Fatalf("= %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
