package cephfs

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/classparam"
	"github.com/monoceph/monoceph/internal/journal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// A CephFS volume's mutable parameters (VolumeAttributesClass) place its subvolume on MDS
// ranks, the knob a filesystem's users tune for metadata-heavy workloads
// (https://docs.ceph.com/en/latest/cephfs/multimds/):
//
//	pinExport       rank the subtree is pinned to; -1 (the default) inherits its parent's
//	pinDistributed  "true": spread its immediate children over all ranks (ephemeral pins)
//	pinRandom       fraction 0–1 of its descendants pinned to random ranks
//
// A modification states all three: a parameter the class does not name goes back to its
// default, so switching to a class without pins unpins the subvolume. The volumes module's
// `fs subvolume pin` sets them (on the subvolume's directory, so every client sees them at
// once). What was applied is kept in the journal, so repeating a modification costs nothing.
const (
	paramPinExport      = "pinExport"
	paramPinDistributed = "pinDistributed"
	paramPinRandom      = "pinRandom"
	attrPins            = "pins"
)

// pins is a validated set of pin policies.
type pins struct {
	export      int64
	distributed bool
	random      float64
}

var defaultPins = pins{export: -1}

func (p pins) String() string {
	return fmt.Sprintf("export=%d,distributed=%t,random=%s", p.export, p.distributed, strconv.FormatFloat(p.random, 'g', -1, 64))
}

// parsePins validates mutable parameters; every problem is INVALID_ARGUMENT naming the
// parameter, found before anything changes.
func parsePins(m map[string]string) (pins, error) {
	p := defaultPins
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch k {
		case paramPinExport:
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < -1 {
				return p, classparam.InvalidMutableParam(k, "%q: want an MDS rank, or -1 for none", v)
			}
			p.export = n
		case paramPinDistributed:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return p, classparam.InvalidMutableParam(k, "%q: want true or false", v)
			}
			p.distributed = b
		case paramPinRandom:
			f, err := strconv.ParseFloat(v, 64)
			// written so that NaN, which compares false with everything, fails too
			if err != nil || !(f >= 0 && f <= 1) {
				return p, classparam.InvalidMutableParam(k, "%q: want a fraction from 0 to 1", v)
			}
			p.random = f
		default:
			return p, classparam.InvalidMutableParam(k, "unknown (known: %s)", strings.Join([]string{paramPinDistributed, paramPinExport, paramPinRandom}, ", "))
		}
	}
	return p, nil
}

// ControllerModifyVolume sets the subvolume's pins to exactly the mutable parameters given.
func (c *Controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is missing")
	}
	want, err := parsePins(req.GetMutableParameters())
	if err != nil {
		return nil, err
	}
	ctx, unlock, err := c.opts.Locks.TryLockContext(ctx, "ControllerModifyVolume", raw)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if id, err := parseVolumeID(raw); err == nil && id.CSI != nil {
		return c.modifyCSIVolume(ctx, req, *id.CSI, want)
	}
	s, rec, err := c.openVolume(ctx, raw, req.GetSecrets())
	if err != nil {
		return nil, err
	}
	defer s.release()
	if !pinsApplied(rec, want) {
		if err := checkPins(ctx, s, want); err != nil {
			return nil, err
		}
	}
	if err := c.applyPins(ctx, s, rec, want); err != nil {
		return nil, err
	}
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// checkPins checks what only the cluster can tell, before anything changes: the MDS refuses a
// random pin above its mds_export_ephemeral_random_max (0.01 unless configured).
func checkPins(ctx context.Context, s site, want pins) error {
	if want.random == 0 {
		return nil
	}
	out, err := ceph.MonCommand(ctx, s.conn, map[string]any{"prefix": "config get", "who": "mds", "key": "mds_export_ephemeral_random_max"})
	if err != nil {
		return err
	}
	max, err := strconv.ParseFloat(strings.Trim(strings.TrimSpace(string(out)), `"`), 64)
	if err != nil {
		return fmt.Errorf("read mds_export_ephemeral_random_max: %q: %w", out, err)
	}
	if want.random > max {
		return classparam.InvalidMutableParam(paramPinRandom, "%s is above the cluster's mds_export_ephemeral_random_max (%s)",
			strconv.FormatFloat(want.random, 'g', -1, 64), strconv.FormatFloat(max, 'g', -1, 64))
	}
	return nil
}

// pinsApplied reports whether the journal says want is what the subvolume has.
func pinsApplied(rec *journal.Record, want pins) bool {
	have := rec.Attrs[attrPins]
	if have == "" {
		have = defaultPins.String()
	}
	return have == want.String()
}

// applyPins sets the pins that differ from what the journal says was applied, then records
// them. A shallow volume has no subvolume of its own: it takes no pins.
func (c *Controller) applyPins(ctx context.Context, s site, rec *journal.Record, want pins) error {
	if pinsApplied(rec, want) {
		return nil
	}
	if rec.Attrs[attrKind] == kindShallow {
		return status.Errorf(codes.InvalidArgument, "mutable_parameters: volume %q is a shallow read-only volume of a snapshot; it has no subvolume to pin", rec.Name)
	}
	sub, group := subvolumeName(rec.UID), rec.Attrs[attrGroup]
	if err := setPins(ctx, s, group, sub, want); err != nil {
		return err
	}
	rec.Attrs[attrPins] = want.String()
	if err := journal.SetAttrs(ctx, s.journal(), journal.Volume, rec); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Volume pins set", "subvolume", s.fs.Name+"/"+group+"/"+sub, "pins", want.String())
	return nil
}

// setPins sets all three pin policies of a subvolume (they are independent: setting one does
// not clear the others).
func setPins(ctx context.Context, s site, group, sub string, want pins) error {
	for _, pin := range []struct{ typ, setting string }{
		{"export", strconv.FormatInt(want.export, 10)},
		{"distributed", map[bool]string{true: "1", false: "0"}[want.distributed]},
		{"random", strconv.FormatFloat(want.random, 'g', -1, 64)},
	} {
		if err := pinSubvolume(ctx, s, group, sub, pin.typ, pin.setting); err != nil {
			return err
		}
	}
	return nil
}

// pinSubvolume sets one pin policy on a subvolume of group (go-ceph's PinSubVolume takes no
// group).
func pinSubvolume(ctx context.Context, s site, group, sub, typ, setting string) error {
	_, err := ceph.MgrCommand(ctx, s.mgr, map[string]any{
		"prefix": "fs subvolume pin", "vol_name": s.fs.Name, "group_name": group, "sub_name": sub,
		"pin_type": typ, "pin_setting": setting,
	})
	return err
}
