package rbd

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ceph/go-ceph/rbd"
	"github.com/monoceph/monoceph/internal/classparam"
	"k8s.io/apimachinery/pkg/api/resource"
)

// QoS limits are VolumeAttributesClass parameters (CSI mutable_parameters). librbd enforces
// them in the client that opens the image, so they hold for every mounter, fuse included,
// and an image's open handles re-read them when they change (the metadata update notifies
// the header's watchers): a change takes effect without restaging.
//
// They are stored as image configuration overrides, the image metadata keys
// `conf_rbd_qos_<name>` that `rbd config image set` writes. A ControllerModifyVolume states
// the whole QoS of the volume: a limit the class does not name is removed (unlimited), so
// switching a PVC to a class without limits lifts them.

// qosKey is one mutable parameter and the librbd option behind it.
type qosKey struct {
	param  string
	option string // rbd_qos_…; the image metadata key is "conf_" + option
	bytes  bool   // a byte rate: Kubernetes quantities ("100Mi") are accepted
	// seconds marks a *_burst_seconds option (at least 1, default 1)
	seconds bool
}

// qosKeys are the mutable parameters an RBD volume takes, for every rate librbd throttles:
// total, read and write operations and bytes per second, each with a burst above the limit
// and how long the burst may last.
var qosKeys = func() []qosKey {
	var out []qosKey
	for _, r := range []struct {
		param, option string
		bytes         bool
	}{
		{"Iops", "iops", false}, {"ReadIops", "read_iops", false}, {"WriteIops", "write_iops", false},
		{"Bps", "bps", true}, {"ReadBps", "read_bps", true}, {"WriteBps", "write_bps", true},
	} {
		out = append(out,
			qosKey{param: "qos" + r.param + "Limit", option: "rbd_qos_" + r.option + "_limit", bytes: r.bytes},
			qosKey{param: "qos" + r.param + "Burst", option: "rbd_qos_" + r.option + "_burst", bytes: r.bytes},
			qosKey{param: "qos" + r.param + "BurstSeconds", option: "rbd_qos_" + r.option + "_burst_seconds", seconds: true},
		)
	}
	return out
}()

func qosMetaKey(k qosKey) string { return "conf_" + k.option }

// qos is a validated set of mutable parameters: librbd option → value. Options not in it
// are unlimited (limits, bursts) or librbd's default of 1 (burst seconds).
type qos map[string]uint64

// parseQoS validates mutable parameters. Every problem is INVALID_ARGUMENT naming the
// parameter, found before anything is changed.
func parseQoS(p map[string]string) (qos, error) {
	byParam := map[string]qosKey{}
	var known []string
	for _, k := range qosKeys {
		byParam[k.param] = k
		known = append(known, k.param)
	}
	out := qos{}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad key of a request is always the same one
	for _, name := range keys {
		k, ok := byParam[name]
		if !ok {
			return nil, classparam.InvalidMutableParam(name, "unknown (known: %s)", strings.Join(known, ", "))
		}
		v, err := parseRate(p[name], k.bytes)
		if err != nil {
			return nil, classparam.InvalidMutableParam(name, "%q: %v", p[name], err)
		}
		if k.seconds && v < 1 {
			return nil, classparam.InvalidMutableParam(name, "%q: a burst lasts at least 1 second", p[name])
		}
		out[k.option] = v
	}
	// librbd takes a burst below its limit without complaint, logs it and keeps the old
	// throttle: refuse it here instead
	for _, k := range qosKeys {
		if strings.HasSuffix(k.option, "_limit") {
			burst := strings.TrimSuffix(k.option, "_limit") + "_burst"
			if l, b := out[k.option], out[burst]; l > 0 && b > 0 && b < l {
				return nil, classparam.InvalidMutableParam(strings.TrimSuffix(k.param, "Limit")+"Burst",
					"%d is below the limit %d (a burst is the rate allowed above the limit, so at least the limit)", b, l)
			}
		}
	}
	return out, nil
}

// parseRate reads a non-negative integer, or for byte rates a Kubernetes quantity.
func parseRate(s string, bytes bool) (uint64, error) {
	if bytes {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return 0, fmt.Errorf("want a byte rate such as 104857600 or 100Mi")
		}
		v, ok := q.AsInt64()
		if !ok || v < 0 {
			return 0, fmt.Errorf("want a whole, non-negative number of bytes per second")
		}
		return uint64(v), nil
	}
	v, err := strconv.ParseUint(s, 10, 63)
	if err != nil {
		return 0, fmt.Errorf("want a non-negative whole number")
	}
	return v, nil
}

// apply makes img's QoS exactly q: given options set, the others removed. Only what differs is
// written, since every metadata change notifies the image's watchers: repeating a
// modification costs one read. Idempotent; a crash half way leaves some options changed, which
// a retry (the CO repeats the modification) completes.
func (q qos) apply(img *rbd.Image) error {
	cur, err := img.ListMetadata()
	if err != nil {
		return err
	}
	for _, k := range qosKeys {
		key := qosMetaKey(k)
		want, set := q[k.option]
		set = set && (want > 0 || k.seconds) // a zero limit or burst is librbd's default
		have, present := cur[key]
		switch {
		case set && (!present || have != strconv.FormatUint(want, 10)):
			if err := img.SetMetadata(key, strconv.FormatUint(want, 10)); err != nil {
				return fmt.Errorf("set %s: %w", key, err)
			}
		case !set && present:
			if err := img.RemoveMetadata(key); err != nil && !isNotFound(err) {
				return fmt.Errorf("remove %s: %w", key, err)
			}
		}
	}
	return nil
}
