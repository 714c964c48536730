package volid

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrNotHandle marks a string that is not a ceph-csi composite handle.
var ErrNotHandle = errors.New("not a ceph-csi volume or snapshot handle")

// HandlePrefix starts every handle ceph-csi has ever written: version 1 of its encoding.
// monoceph's own IDs start with a letter ("rv1:", "fs1:", …), so the first five bytes tell the
// two apart.
const HandlePrefix = "0001-"

// UUIDLen is the length of the object UUID a handle ends in.
const UUIDLen = 36

// maxClusterIDLen is ceph-csi's own limit: it refuses to compose a handle longer than 128
// bytes, and the fixed part takes 64.
const maxClusterIDLen = 64

// ValidUUID reports whether s is a UUID as ceph-csi writes it (see uuidPattern).
func ValidUUID(s string) bool { return uuidPattern.MatchString(s) }

// uuidPattern is the text form of the UUIDs ceph-csi reserves (google/uuid, lower case); the
// UUID names RADOS objects (csi.volume.<uuid>), so nothing else is accepted.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// Handle is a decoded ceph-csi volume or snapshot handle:
//
//	0001-<4 hex: len(clusterID)>-<clusterID>-<16 hex: location>-<UUID>
//
// The location is the RBD pool ID of the image (RBD) or the filesystem ID (CephFS); volumes and
// snapshots use the same encoding.
type Handle struct {
	ClusterID  string
	LocationID int64
	UUID       string
}

// String encodes h as ceph-csi does: lower-case hex, big-endian.
func (h Handle) String() string {
	var n [2]byte
	binary.BigEndian.PutUint16(n[:], uint16(len(h.ClusterID)))
	var loc [8]byte
	binary.BigEndian.PutUint64(loc[:], uint64(h.LocationID))
	return HandlePrefix + hex.EncodeToString(n[:]) + "-" + h.ClusterID + "-" + hex.EncodeToString(loc[:]) + "-" + h.UUID
}

// Validate checks that h encodes to a handle ParseHandle accepts.
func (h Handle) Validate() error {
	switch {
	case h.ClusterID == "" || len(h.ClusterID) > maxClusterIDLen:
		return fmt.Errorf("clusterID %q: want 1-%d bytes", h.ClusterID, maxClusterIDLen)
	case !uuidPattern.MatchString(h.UUID):
		return fmt.Errorf("UUID %q is malformed", h.UUID)
	}
	return nil
}

// IsHandle reports whether s has the shape of a ceph-csi handle, without decoding it: what the
// controllers dispatch on.
func IsHandle(s string) bool { return strings.HasPrefix(s, HandlePrefix) }

// ParseHandle decodes a handle. It is stricter than ceph-csi's own decoder (which checks
// neither the version nor the separators) but accepts everything ceph-csi encodes: a string
// that ceph-csi could not have written is not one of its volumes.
func ParseHandle(s string) (Handle, error) {
	bad := func(why string) (Handle, error) {
		return Handle{}, fmt.Errorf("%w: %q: %s", ErrNotHandle, truncate(s), why)
	}
	if !IsHandle(s) {
		return bad("it does not start with " + HandlePrefix)
	}
	if len(s) < len(HandlePrefix)+5 || s[9] != '-' {
		return bad("no cluster ID length")
	}
	n, ok := hexUint(s[5:9])
	if !ok {
		return bad("the cluster ID length is not lower-case hex")
	}
	rest := s[10:]
	if n == 0 || n > maxClusterIDLen || len(rest) != int(n)+1+16+1+UUIDLen {
		return bad("its length does not match the encoded cluster ID length")
	}
	h := Handle{ClusterID: rest[:n], UUID: rest[n+18:]}
	if rest[n] != '-' || rest[n+17] != '-' {
		return bad("separators are misplaced")
	}
	loc, ok := hexUint(rest[n+1 : n+17])
	if !ok || loc > 1<<63-1 {
		return bad("the location ID is not a non-negative lower-case hex int64")
	}
	h.LocationID = int64(loc)
	if !uuidPattern.MatchString(h.UUID) {
		return bad("it does not end in a UUID")
	}
	return h, nil
}

// hexUint decodes lower-case hex of 4 or 16 digits.
func hexUint(s string) (uint64, bool) {
	if strings.ToLower(s) != s {
		return 0, false
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, true
}
