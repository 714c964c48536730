// Package volcap checks requested CSI volume capabilities and capacity ranges against what a
// backend supports, with the spec's error codes and messages that name the offending field.
package volcap

import (
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Support describes what a backend can serve.
type Support struct {
	// Block reports whether raw block access is possible at all.
	Block bool
	// Modes are the access modes served with mount access.
	MountModes map[csi.VolumeCapability_AccessMode_Mode]bool
	// BlockModes are the access modes served with block access.
	BlockModes map[csi.VolumeCapability_AccessMode_Mode]bool
	// FsTypes are the filesystems the node can create; "" is always accepted (default).
	FsTypes map[string]bool
}

// Check returns "" when every capability is supported, else the reason the first one is not.
func (s Support) Check(caps []*csi.VolumeCapability) string {
	for i, c := range caps {
		if reason := s.check(c); reason != "" {
			return fmt.Sprintf("volume_capabilities[%d]: %s", i, reason)
		}
	}
	return ""
}

func (s Support) check(c *csi.VolumeCapability) string {
	if c == nil {
		return "capability is empty"
	}
	mode := c.GetAccessMode().GetMode()
	if c.GetAccessMode() == nil || mode == csi.VolumeCapability_AccessMode_UNKNOWN {
		return "access_mode is missing"
	}
	switch {
	case c.GetBlock() != nil:
		if !s.Block {
			return "block access is not supported"
		}
		if !s.BlockModes[mode] {
			return fmt.Sprintf("access mode %s is not supported with block access", mode)
		}
	case c.GetMount() != nil:
		if !s.MountModes[mode] {
			return fmt.Sprintf("access mode %s is not supported with mount access", mode)
		}
		if fs := c.GetMount().GetFsType(); fs != "" && !s.FsTypes[fs] {
			return fmt.Sprintf("fs_type %q is not supported", fs)
		}
	default:
		return "access_type is missing (want mount or block)"
	}
	return ""
}

// Validate is Check for requests that must carry capabilities: a missing list or an
// unsupported capability is INVALID_ARGUMENT.
func (s Support) Validate(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities is missing")
	}
	if reason := s.Check(caps); reason != "" {
		return status.Error(codes.InvalidArgument, reason)
	}
	return nil
}

// ReadOnly reports whether every capability only reads (the *_READER_ONLY modes).
func ReadOnly(caps []*csi.VolumeCapability) bool {
	if len(caps) == 0 {
		return false
	}
	for _, c := range caps {
		switch c.GetAccessMode().GetMode() {
		case csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY, csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY:
		default:
			return false
		}
	}
	return true
}

// IsBlock reports whether any capability asks for block access.
func IsBlock(caps []*csi.VolumeCapability) bool {
	for _, c := range caps {
		if c.GetBlock() != nil {
			return true
		}
	}
	return false
}

// FsType returns the first fs_type requested, or "".
func FsType(caps []*csi.VolumeCapability) string {
	for _, c := range caps {
		if fs := c.GetMount().GetFsType(); fs != "" {
			return fs
		}
	}
	return ""
}

// MiB is the unit sizes are rounded up to.
const MiB = 1 << 20

// Size resolves a capacity range to a size in whole MiB. With no range it is def. A range the
// rounding cannot satisfy, or a limit below the required size, is OUT_OF_RANGE.
func Size(r *csi.CapacityRange, def int64) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity_range: negative bytes")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.InvalidArgument, "capacity_range: required_bytes %d exceeds limit_bytes %d", req, lim)
	}
	size := (req + MiB - 1) / MiB * MiB
	if req == 0 {
		size = (def + MiB - 1) / MiB * MiB
		if lim > 0 && size > lim {
			size = lim / MiB * MiB // only a limit: the largest whole-MiB size within it
		}
	}
	if lim > 0 && size > lim {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: %d bytes rounded up to whole MiB (%d) exceeds limit_bytes %d", req, size, lim)
	}
	if size == 0 {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: limit_bytes %d is smaller than 1 MiB", lim)
	}
	return size, nil
}

// Fits reports whether size satisfies a capacity range (for idempotent repeats).
func Fits(size int64, r *csi.CapacityRange) bool {
	if r.GetRequiredBytes() > 0 && size < r.GetRequiredBytes() {
		return false
	}
	if r.GetLimitBytes() > 0 && size > r.GetLimitBytes() {
		return false
	}
	return true
}
