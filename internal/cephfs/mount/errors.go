package mount

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/hostexec"
)

// ErrMounterUnavailable is the class of UnavailableError.
var ErrMounterUnavailable = errors.New("mounter unavailable on this node")

// UnavailableError says why a mounter cannot be used on this node.
type UnavailableError struct {
	Mounter string
	Reason  string
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("mounter %q is not available on this node: %s", e.Mounter, e.Reason)
}

// Is makes errors.Is(err, ErrMounterUnavailable) work.
func (e *UnavailableError) Is(target error) bool { return target == ErrMounterUnavailable }

// Mount helpers print the errno they failed with: ceph-fuse as "ceph mount failed with (2) No
// such file or directory" or "authenticate failed: (13) Permission denied", mount.ceph as
// "mount error 2 = No such file or directory".
var errnoPatterns = []*regexp.Regexp{
	regexp.MustCompile(`\((\d{1,3})\) [A-Z]`),
	regexp.MustCompile(`mount error (\d{1,3}) =`),
}

// errnoError carries the errno a helper printed so ceph.Wrap classifies it in the driver's
// vocabulary (ceph.ErrNotFound, ceph.ErrPermission, ...).
type errnoError struct {
	errno int
	err   error
}

func (e *errnoError) Error() string  { return e.err.Error() }
func (e *errnoError) Unwrap() error  { return e.err }
func (e *errnoError) ErrorCode() int { return -e.errno }

// classify wraps a failed helper run as the result of op, with the errno its output names.
func classify(op string, err error) error {
	var ce *hostexec.CommandError
	if errors.As(err, &ce) {
		for _, re := range errnoPatterns {
			if m := re.FindStringSubmatch(ce.Output); m != nil {
				n, _ := strconv.Atoi(m[1])
				return ceph.Wrap(op, &errnoError{errno: n, err: err})
			}
		}
	}
	return ceph.Wrap(op, err)
}
