// Package volid encodes and decodes monoceph's self-describing volume and snapshot IDs, and the
// short unique IDs (UIDs) they end in; the handles ceph-csi gives its volumes and snapshots
// (handle.go); and IDs of either format (Either), so each of the two is parsed in one place.
//
// An ID names everything needed to find its Ceph object without a lookup, and stays within the
// CSI limit of 128 bytes:
//
//	RBD volume       rv1:<clusterID>:<poolID>:<radosNamespace>:<image UID>
//	RBD snapshot     rs1:<clusterID>:<poolID>:<radosNamespace>:<image UID>:<snapshot UID>
//	RBD group member rm1:<clusterID>:<poolID>:<radosNamespace>:<image UID>:<group snapshot UID>
//	RBD group snap   rg1:<clusterID>:<poolID>:<radosNamespace>:<group snapshot UID>
//	CephFS volume    fv1:<clusterID>:<fscid>:<subvolume UID>
//	CephFS snapshot  fs1:<clusterID>:<fscid>:<subvolume UID>:<snapshot UID>
//	CephFS group     fg1:<clusterID>:<fscid>:<group snapshot UID>
//
// A string that does not decode is reported as ErrMalformed: by the CSI spec such an ID names a
// volume that does not exist.
package volid

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
)

// MaxLen is the CSI limit on volume and snapshot IDs.
const MaxLen = 128

// ErrMalformed marks a string that is not an ID of the expected kind.
var ErrMalformed = errors.New("malformed ID")

// UIDLen is the length of a UID: 16 base32 characters, 80 bits.
const UIDLen = 16

// Shards is how many journal shards UIDs are spread over (see ShardOf).
const Shards = 32

// Alphabet is the character set of UIDs; shard i is Alphabet[i].
const Alphabet = "abcdefghijklmnopqrstuvwxyz234567"

const alphabet = Alphabet

var (
	uidEnc         = base32.NewEncoding(alphabet).WithPadding(base32.NoPadding)
	uidPattern     = regexp.MustCompile(`^[a-z2-7]{16}$`)
	clusterPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,35}$`)
	nsPattern      = regexp.MustCompile(`^[A-Za-z0-9._-]{0,32}$`)
)

// MaxNamespaceLen bounds RADOS namespaces that appear in IDs, so the longest RBD snapshot ID
// (36-character cluster ID, 10-digit pool ID) still fits in 128 bytes.
const MaxNamespaceLen = 32

// ValidNamespace reports whether ns can appear in an ID.
func ValidNamespace(ns string) bool { return nsPattern.MatchString(ns) }

// ShardOf maps a request name to the journal shard its reservation lives in.
func ShardOf(name string) byte {
	h := fnv.New32a()
	h.Write([]byte(name))
	return alphabet[h.Sum32()%Shards]
}

// NewUID returns a random UID whose first character is shard, so the shard of a reservation
// can be read off any ID that carries its UID.
func NewUID(shard byte) (string, error) {
	if strings.IndexByte(alphabet, shard) < 0 {
		return "", fmt.Errorf("shard %q is not a UID character", shard)
	}
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return string(shard) + uidEnc.EncodeToString(b[:])[1:], nil
}

// ValidUID reports whether s is a well-formed UID.
func ValidUID(s string) bool { return uidPattern.MatchString(s) }

// RBDVolume locates an RBD image.
type RBDVolume struct {
	ClusterID string
	PoolID    int64
	Namespace string
	UID       string
}

// RBDSnapshot locates an RBD snapshot: its image and its own UID.
type RBDSnapshot struct {
	RBDVolume
	SnapUID string
	// Member marks the member of a group snapshot (an rm1 ID): SnapUID is then the group
	// snapshot's UID, and the RBD snapshot is the image's snapshot of that group snapshot (in
	// RBD's group snapshot namespace, found through its group, not by a name of ours).
	Member bool
}

// CephFSVolume locates a CephFS subvolume's reservation.
type CephFSVolume struct {
	ClusterID string
	FSCID     int64
	UID       string
}

// CephFSSnapshot locates a CephFS subvolume snapshot's reservation.
type CephFSSnapshot struct {
	CephFSVolume
	SnapUID string
}

func (v RBDVolume) String() string {
	return fmt.Sprintf("rv1:%s:%d:%s:%s", v.ClusterID, v.PoolID, v.Namespace, v.UID)
}

func (s RBDSnapshot) String() string {
	prefix := "rs1"
	if s.Member {
		prefix = "rm1"
	}
	return fmt.Sprintf("%s:%s:%d:%s:%s:%s", prefix, s.ClusterID, s.PoolID, s.Namespace, s.UID, s.SnapUID)
}

func (v CephFSVolume) String() string {
	return fmt.Sprintf("fv1:%s:%d:%s", v.ClusterID, v.FSCID, v.UID)
}

func (s CephFSSnapshot) String() string {
	return fmt.Sprintf("fs1:%s:%d:%s:%s", s.ClusterID, s.FSCID, s.UID, s.SnapUID)
}

// Validate checks every field, so an ID is never built from parts that would not decode.
func (v RBDVolume) Validate() error {
	switch {
	case !clusterPattern.MatchString(v.ClusterID):
		return fmt.Errorf("clusterID %q cannot be part of an ID", v.ClusterID)
	case v.PoolID < 0:
		return fmt.Errorf("pool ID %d is negative", v.PoolID)
	case !nsPattern.MatchString(v.Namespace):
		return fmt.Errorf("radosNamespace %q: want at most %d characters of [A-Za-z0-9._-]", v.Namespace, MaxNamespaceLen)
	case !ValidUID(v.UID):
		return fmt.Errorf("UID %q is malformed", v.UID)
	}
	return nil
}

// Validate checks every field.
func (v CephFSVolume) Validate() error {
	switch {
	case !clusterPattern.MatchString(v.ClusterID):
		return fmt.Errorf("clusterID %q cannot be part of an ID", v.ClusterID)
	case v.FSCID < 0:
		return fmt.Errorf("filesystem ID %d is negative", v.FSCID)
	case !ValidUID(v.UID):
		return fmt.Errorf("UID %q is malformed", v.UID)
	}
	return nil
}

func split(s, prefix string, n int) ([]string, error) {
	if len(s) > MaxLen || !strings.HasPrefix(s, prefix+":") {
		return nil, ErrMalformed
	}
	parts := strings.Split(s[len(prefix)+1:], ":")
	if len(parts) != n {
		return nil, ErrMalformed
	}
	return parts, nil
}

func parseID(s string) (int64, error) {
	// no signs, no leading zeros: one ID has one spelling
	if s == "" || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, ErrMalformed
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, ErrMalformed
	}
	return n, nil
}

func malformed(kind, s string) error {
	return fmt.Errorf("%w: %q is not a %s ID", ErrMalformed, truncate(s), kind)
}

func truncate(s string) string {
	if len(s) > MaxLen {
		return s[:MaxLen] + "…"
	}
	return s
}

// ParseRBDVolume decodes an RBD volume ID.
func ParseRBDVolume(s string) (RBDVolume, error) {
	p, err := split(s, "rv1", 4)
	if err != nil {
		return RBDVolume{}, malformed("RBD volume", s)
	}
	v, err := rbdVolume(p)
	if err != nil {
		return RBDVolume{}, malformed("RBD volume", s)
	}
	return v, nil
}

func rbdVolume(p []string) (RBDVolume, error) {
	id, err := parseID(p[1])
	if err != nil {
		return RBDVolume{}, err
	}
	v := RBDVolume{ClusterID: p[0], PoolID: id, Namespace: p[2], UID: p[3]}
	if v.Validate() != nil {
		return RBDVolume{}, ErrMalformed
	}
	return v, nil
}

// ParseRBDSnapshot decodes an RBD snapshot ID: of a snapshot of its own (rs1) or of the member
// of a group snapshot (rm1).
func ParseRBDSnapshot(s string) (RBDSnapshot, error) {
	member := strings.HasPrefix(s, "rm1:")
	prefix := "rs1"
	if member {
		prefix = "rm1"
	}
	p, err := split(s, prefix, 5)
	if err != nil {
		return RBDSnapshot{}, malformed("RBD snapshot", s)
	}
	v, err := rbdVolume(p[:4])
	if err != nil || !ValidUID(p[4]) {
		return RBDSnapshot{}, malformed("RBD snapshot", s)
	}
	return RBDSnapshot{RBDVolume: v, SnapUID: p[4], Member: member}, nil
}

// ParseCephFSVolume decodes a CephFS volume ID.
func ParseCephFSVolume(s string) (CephFSVolume, error) {
	p, err := split(s, "fv1", 3)
	if err != nil {
		return CephFSVolume{}, malformed("CephFS volume", s)
	}
	v, err := cephfsVolume(p)
	if err != nil {
		return CephFSVolume{}, malformed("CephFS volume", s)
	}
	return v, nil
}

func cephfsVolume(p []string) (CephFSVolume, error) {
	id, err := parseID(p[1])
	if err != nil {
		return CephFSVolume{}, err
	}
	v := CephFSVolume{ClusterID: p[0], FSCID: id, UID: p[2]}
	if v.Validate() != nil {
		return CephFSVolume{}, ErrMalformed
	}
	return v, nil
}

// ParseCephFSSnapshot decodes a CephFS snapshot ID.
func ParseCephFSSnapshot(s string) (CephFSSnapshot, error) {
	p, err := split(s, "fs1", 4)
	if err != nil {
		return CephFSSnapshot{}, malformed("CephFS snapshot", s)
	}
	v, err := cephfsVolume(p[:3])
	if err != nil || !ValidUID(p[3]) {
		return CephFSSnapshot{}, malformed("CephFS snapshot", s)
	}
	return CephFSSnapshot{CephFSVolume: v, SnapUID: p[3]}, nil
}
