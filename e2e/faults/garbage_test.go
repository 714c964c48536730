package faults

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// garbage returns n requests a CO, a user or an attacker could send that must all fail and
// change nothing: malformed and well-formed-but-missing IDs, bad and missing parameters,
// impossible sizes, places that do not exist, missing and wrong credentials. Some pass every
// check the driver can make without Ceph and fail only there (an impossible size, a missing
// source), which is where reservations used to stay behind.
func garbage(typ string, params, secrets map[string]string, volume, snapshot string, n int) []func(context.Context, csi.ControllerClient) error {
	mount := []*csi.VolumeCapability{{
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}}
	with := func(kv ...string) map[string]string {
		p := maps.Clone(params)
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(p, kv[i])
			} else {
				p[kv[i]] = kv[i+1]
			}
		}
		return p
	}
	// a well-formed ID of something that does not exist: the last field of ours is the UID
	missing := func(id string) string { return id[:strings.LastIndex(id, ":")+1] + "aaaaaaaaaaaaaaaa" }
	create := func(name string, size int64, p, s map[string]string, src *csi.VolumeContentSource) func(context.Context, csi.ControllerClient) error {
		return func(ctx context.Context, c csi.ControllerClient) error {
			_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
				VolumeCapabilities: mount, Parameters: p, Secrets: s, VolumeContentSource: src})
			return err
		}
	}
	volSrc := func(id string) *csi.VolumeContentSource {
		return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
	}
	badKey := map[string]string{"userID": secrets["userID"], "userKey": "AQAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAA=="}
	injection := map[string]string{"userID": "admin,secretfile=/etc/shadow", "userKey": secrets["userKey"]}
	kinds := []func(i int) func(context.Context, csi.ControllerClient) error{
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-unknown-%d", i), 1<<20, with("bogus", "1"), secrets, nil)
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-nocluster-%d", i), 1<<20, with("clusterID", "nowhere"), secrets, nil)
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-noname-%d", i), 1<<20, params, nil, nil)
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-badkey-%d", i), 1<<20, params, badKey, nil)
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-inject-%d", i), 1<<20, params, injection, nil)
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-negative-%d", i), -1, params, secrets, nil)
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-missing-src-%d", i), 1<<20, params, secrets, volSrc(missing(volume)))
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-garbage-src-%d", i), 1<<20, params, secrets, volSrc("../../etc/passwd"))
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-smaller-%d", i), 1, params, secrets, volSrc(volume))
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return func(ctx context.Context, c csi.ControllerClient) error {
				_, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("g-snap-%d", i), SourceVolumeId: missing(volume), Secrets: secrets})
				return err
			}
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return func(ctx context.Context, c csi.ControllerClient) error {
				_, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: fmt.Sprintf("g-snap-garbage-%d", i), SourceVolumeId: "-oX", Secrets: secrets})
				return err
			}
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return func(ctx context.Context, c csi.ControllerClient) error {
				_, err := c.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: missing(volume),
					CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}, Secrets: secrets})
				return err
			}
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return func(ctx context.Context, c csi.ControllerClient) error {
				_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "", Parameters: params, Secrets: secrets})
				return err
			}
		},
		func(i int) func(context.Context, csi.ControllerClient) error {
			return create(fmt.Sprintf("g-from-missing-snap-%d", i), 1<<20, params, secrets, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
				Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: missing(snapshot)}}})
		},
	}
	switch typ {
	case "rbd":
		kinds = append(kinds,
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-huge-%d", i), 1<<52, params, secrets, nil) // librbd: EINVAL
			},
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-ns-%d", i), 1<<20, with("radosNamespace", fmt.Sprintf("garbage%d", i%7)), secrets, nil)
			},
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-datapool-%d", i), 1<<20, with("dataPool", "nope"), secrets, nil)
			},
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-pool-%d", i), 1<<20, with("pool", "nope"), secrets, nil)
			},
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-features-%d", i), 1<<20, with("imageFeatures", "fast-diff"), secrets, nil)
			},
		)
	case "cephfs":
		kinds = append(kinds,
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-fs-%d", i), 1<<20, with("fsName", "nofs"), secrets, nil)
			},
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-layout-%d", i), 1<<20, with("pool", "nope"), secrets, nil)
			},
			func(i int) func(context.Context, csi.ControllerClient) error {
				return create(fmt.Sprintf("g-group-%d", i), 1<<20, with("subvolumeGroup", "../x"), secrets, nil)
			},
		)
	}
	out := make([]func(context.Context, csi.ControllerClient) error, n)
	for i := range n {
		out[i] = kinds[i%len(kinds)](i)
	}
	return out
}
