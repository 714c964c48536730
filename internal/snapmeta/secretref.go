package snapmeta

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The VolumeSnapshotClass parameters naming the Secret that CreateSnapshot got; the same Ceph
// user reads the snapshot's diffs.
const (
	paramSecretName      = "csi.storage.k8s.io/snapshotter-secret-name"
	paramSecretNamespace = "csi.storage.k8s.io/snapshotter-secret-namespace"
	// annDefaultClass marks a driver's default VolumeSnapshotClass.
	annDefaultClass = "snapshot.storage.kubernetes.io/is-default-class"
)

// secretRef is a Secret's namespace and name.
type secretRef struct{ namespace, name string }

// snapshotterSecret resolves the snapshotter Secret of a VolumeSnapshotClass's parameters for
// the VolumeSnapshot namespace/name bound to the VolumeSnapshotContent content, as the
// external-snapshotter (GetSecretReference, whose resolution the snapshot controller hands to
// CreateSnapshot) and the external-snapshot-metadata sidecar resolve it:
//
//   - both parameters or neither (then ok is false: the class names no Secret); neither empty;
//   - the namespace may use ${volumesnapshotcontent.name} and ${volumesnapshot.namespace}, the
//     name also ${volumesnapshot.name}; any other token, with or without braces, is an error;
//   - the result must be a valid namespace (DNS-1123 label) and Secret name (DNS-1123
//     subdomain).
func snapshotterSecret(params map[string]string, content, namespace, name string) (ref secretRef, ok bool, err error) {
	nameTmpl, hasName := params[paramSecretName]
	nsTmpl, hasNS := params[paramSecretNamespace]
	switch {
	case !hasName && !hasNS:
		return secretRef{}, false, nil
	case hasName != hasNS:
		return secretRef{}, false, fmt.Errorf("parameters %s and %s go together: only one is set", paramSecretName, paramSecretNamespace)
	case nameTmpl == "" || nsTmpl == "":
		return secretRef{}, false, fmt.Errorf("parameters %s and %s must not be empty", paramSecretName, paramSecretNamespace)
	}
	nsParams := map[string]string{"volumesnapshotcontent.name": content, "volumesnapshot.namespace": namespace}
	if ref.namespace, err = resolveTemplate(paramSecretNamespace, nsTmpl, nsParams); err != nil {
		return secretRef{}, false, err
	}
	if errs := validation.IsDNS1123Label(ref.namespace); len(errs) > 0 {
		return secretRef{}, false, fmt.Errorf("parameter %s %q resolved to %q, not a namespace name: %s", paramSecretNamespace, nsTmpl, ref.namespace, strings.Join(errs, "; "))
	}
	nameParams := map[string]string{"volumesnapshotcontent.name": content, "volumesnapshot.namespace": namespace, "volumesnapshot.name": name}
	if ref.name, err = resolveTemplate(paramSecretName, nameTmpl, nameParams); err != nil {
		return secretRef{}, false, err
	}
	if errs := validation.IsDNS1123Subdomain(ref.name); len(errs) > 0 {
		return secretRef{}, false, fmt.Errorf("parameter %s %q resolved to %q, not a Secret name: %s", paramSecretName, nameTmpl, ref.name, strings.Join(errs, "; "))
	}
	return ref, true, nil
}

// resolveTemplate expands ${token} (and $token) with os.Expand, as external-snapshotter does,
// and fails on any token params lacks.
func resolveTemplate(param, tmpl string, params map[string]string) (string, error) {
	var missing []string
	out := os.Expand(tmpl, func(k string) string {
		v, ok := params[k]
		if !ok && !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		known := slices.Sorted(maps.Keys(params))
		return "", fmt.Errorf("parameter %s %q: unknown tokens %q (known: ${%s})", param, tmpl, missing, strings.Join(known, "}, ${"))
	}
	return out, nil
}
