// Package cephcsiparam holds the rules for ceph-csi's StorageClass keys in classes that served
// ceph-csi and now serve monoceph: each key accepted, or refused naming the feature.
package cephcsiparam

import (
	"sort"
	"strconv"

	"github.com/monoceph/monoceph/internal/classparam"
)

// ceph-csi's StorageClass keys, for classes that served ceph-csi and now serve monoceph: a key
// is accepted where its value agrees with what monoceph does, and refused with
// INVALID_ARGUMENT naming the feature where monoceph would have to ignore what it asks for.
// Nothing is silently ignored that changes what a volume is: the keys accepted without looking
// at their value (Ignored) only choose things monoceph decides itself, or mean nothing unless
// another, checked key enables them.

// KeyCheck checks the value of one ceph-csi key.
type KeyCheck func(key, value string) error

// Keys maps ceph-csi keys to their checks.
type Keys map[string]KeyCheck

// Keys lists the keys, for UnknownParams.
func (k Keys) Keys() []string {
	out := make([]string, 0, len(k))
	for key := range k {
		out = append(out, key)
	}
	sort.Strings(out)
	return out
}

// Check runs the checks of the keys p holds.
func Check(p map[string]string, keys Keys) error {
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	sort.Strings(names) // the first bad key, always the same one
	for _, k := range names {
		if check, ok := keys[k]; ok {
			if err := check(k, p[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Ignored accepts any value.
func Ignored(string, string) error { return nil }

// OnlyValue accepts only want (what monoceph does anyway); other values ask for feature.
func OnlyValue(want, feature string) KeyCheck {
	return func(key, v string) error {
		if v == want {
			return nil
		}
		return classparam.InvalidParam(key, "%q: %s not supported by monoceph (only %q)", v, isAre(feature), want)
	}
}

// NotTrue accepts a boolean that is false; true asks for feature.
func NotTrue(feature string) KeyCheck {
	return func(key, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return classparam.InvalidParam(key, "%q: want true or false", v)
		}
		if b {
			return classparam.InvalidParam(key, "%q: %s not supported by monoceph", v, isAre(feature))
		}
		return nil
	}
}

// Empty accepts only an empty value.
func Empty(feature string) KeyCheck {
	return func(key, v string) error {
		if v == "" {
			return nil
		}
		return classparam.InvalidParam(key, "%q: %s not supported by monoceph", v, isAre(feature))
	}
}

// Refused refuses the key whatever its value.
func Refused(feature string) KeyCheck {
	return func(key, v string) error {
		return classparam.InvalidParam(key, "%q: %s not supported by monoceph", v, isAre(feature))
	}
}

// isAre makes "encryption is" and "custom mkfs options are" read right.
func isAre(feature string) string {
	if len(feature) > 1 && feature[len(feature)-1] == 's' {
		return feature + " are"
	}
	return feature + " is"
}
