// Package classparam checks StorageClass (and VolumeAttributesClass) parameters the way both
// controllers answer them: INVALID_ARGUMENT naming the key, unknown keys refused, Ceph names
// strict, the CO's reserved keys let through.
package classparam

import (
	"fmt"
	"strings"

	"github.com/monoceph/monoceph/internal/cephname"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ReservedPrefix marks parameters that belong to the CO and the sidecars (secret references,
// PVC metadata, fstype); drivers ignore them.
const ReservedPrefix = "csi.storage.k8s.io/"

// InvalidParam is INVALID_ARGUMENT naming a parameter.
func InvalidParam(key, format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, "parameters[%q]: %s", key, fmt.Sprintf(format, a...))
}

// NameParams checks that the values of keys present in p are strict Ceph names
// (internal/cephname). The node refuses any other name (it reaches command lines and paths
// there), so a class asking for one fails at CreateVolume instead of at every stage.
func NameParams(p map[string]string, keys ...string) error {
	for _, k := range keys {
		if v, ok := p[k]; ok && v != "" {
			if err := cephname.Check(v); err != nil {
				return InvalidParam(k, "%q: %v", v, err)
			}
		}
	}
	return nil
}

// UnknownParams rejects keys that are neither known nor reserved, so a misspelt parameter
// fails loudly instead of silently falling back to a default.
func UnknownParams(p map[string]string, known ...string) error {
	ok := map[string]bool{}
	for _, k := range known {
		ok[k] = true
	}
	for k := range p {
		if !ok[k] && !strings.HasPrefix(k, ReservedPrefix) {
			return status.Errorf(codes.InvalidArgument, "parameters: unknown key %q (known: %s)", k, strings.Join(known, ", "))
		}
	}
	return nil
}

// InvalidMutableParam is INVALID_ARGUMENT naming a mutable parameter (a VolumeAttributesClass
// parameter).
func InvalidMutableParam(key, format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, "mutable_parameters[%q]: %s", key, fmt.Sprintf(format, a...))
}
