package cephname

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// MaxLen bounds one name (a pool, an image...); Ceph's own limits are at least this long for
// the names the driver creates, and NAME_MAX is 255 for a path component.
const MaxLen = 255

// MaxPathLen bounds a path inside a filesystem (PATH_MAX less its NUL).
const MaxPathLen = 4095

// Charset describes what Check accepts, for error messages.
const Charset = "1-255 characters of [A-Za-z0-9_.-], starting with a letter, digit or underscore"

// The first character may not be '-' (an option to the tool that receives the name) or '.'
// ("." and ".." walk out of a directory; a dot file is never a Ceph name the driver makes).
// ',' (mount option lists), '=', '/', '@', blanks and control characters never appear.
var pattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// Check reports why name is not a strict Ceph name, or nil. The error does not repeat the
// name: callers say which field it is and whether its value may be shown.
func Check(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxLen:
		return fmt.Errorf("is %d characters long: want %s", len(name), Charset)
	case !pattern.MatchString(name):
		return errors.New("want " + Charset)
	}
	return nil
}

// CheckPath reports why p is not a clean absolute path of strict names ("/a/b_c/d-1"), or nil.
// "/" itself, the root of a filesystem, is a valid path.
func CheckPath(p string) error {
	switch {
	case len(p) > MaxPathLen:
		return fmt.Errorf("is %d characters long: want at most %d", len(p), MaxPathLen)
	case !strings.HasPrefix(p, "/") || path.Clean(p) != p:
		return errors.New("want a clean absolute path")
	case p == "/":
		return nil
	}
	for c := range strings.SplitSeq(p[1:], "/") {
		if err := Check(c); err != nil {
			return fmt.Errorf("component %q: %v", c, err)
		}
	}
	return nil
}
