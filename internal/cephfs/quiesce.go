package cephfs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/monoceph/monoceph/internal/ceph"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// CephFS group snapshots are consistent only if every subvolume's writers are paused while the
// snapshots are cut: the volumes module's `fs quiesce` (Ceph 19.2 Squid and later) pauses a set
// of subvolumes (their clients' I/O drained and blocked by the MDS) until the set is released
// or expires. Older managers lack the command; that is read from their command table, never
// from an error (an unknown command is EINVAL, like a bad argument).

// Bounds of a quiesce set (fs quiesce --timeout, --expiration): how long the members may take
// to pause, and how long they stay paused at most if the driver dies before releasing them.
const (
	quiesceTimeout    = 60 * time.Second
	quiesceExpiration = 60 * time.Second
	// quiesceSupportTTL is how long a manager's answer is trusted: managers get upgraded.
	quiesceSupportTTL = 5 * time.Minute
)

// mgrAPI is the part of the manager group snapshots use; tests replace it to play a newer
// manager than the local cluster's.
type mgrAPI interface {
	CommandTable(ctx context.Context, mgr *ceph.Conn) (ceph.CommandTable, error)
	Command(ctx context.Context, mgr *ceph.Conn, cmd map[string]any) ([]byte, error)
}

// cephMgr is the real manager.
type cephMgr struct{}

func (cephMgr) CommandTable(ctx context.Context, mgr *ceph.Conn) (ceph.CommandTable, error) {
	return ceph.MgrCommandTable(ctx, mgr)
}

func (cephMgr) Command(ctx context.Context, mgr *ceph.Conn, cmd map[string]any) ([]byte, error) {
	return ceph.MgrCommand(ctx, mgr, cmd)
}

// commandSupport remembers per cluster whether its manager has a command (`fs quiesce`,
// `fs subvolume metadata`).
type commandSupport struct {
	mu    sync.Mutex
	known map[string]supportProbe
}

type supportProbe struct {
	ok bool
	at time.Time
}

// errNoQuiesce is the answer where the manager has no `fs quiesce`.
func errNoQuiesce(clusterID string) error {
	return status.Errorf(codes.FailedPrecondition, "cannot snapshot these volumes together: CephFS group snapshots need the manager command "+
		"`fs quiesce` (Ceph 19.2 Squid or later) to pause the volumes' writers at one point in time, and the manager of cluster %q lacks it", clusterID)
}

// canQuiesce reports whether the cluster's manager has `fs quiesce`.
func (c *Controller) canQuiesce(ctx context.Context, clusterID string, s site) (bool, error) {
	c.quiesce.mu.Lock()
	p, ok := c.quiesce.known[clusterID]
	c.quiesce.mu.Unlock()
	if ok && time.Since(p.at) < quiesceSupportTTL {
		return p.ok, nil
	}
	table, err := c.mgr.CommandTable(ctx, s.mgr)
	if err != nil {
		return false, err
	}
	_, has := table.Find("fs", "quiesce")
	c.quiesce.mu.Lock()
	if c.quiesce.known == nil {
		c.quiesce.known = map[string]supportProbe{}
	}
	c.quiesce.known[clusterID] = supportProbe{ok: has, at: time.Now()}
	c.quiesce.mu.Unlock()
	return has, nil
}

// cephFloat encodes as a JSON float literal: the manager's argument parser rejects 60 where
// a CephFloat is declared, as the monitors do for `osd blocklist` expiries.
type cephFloat float64

func (f cephFloat) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(float64(f), 'f', 1, 64)), nil
}

// quiesceReply is the part of `fs quiesce`'s answer the driver reads.
type quiesceReply struct {
	Sets map[string]struct {
		Version int64 `json:"version"`
		State   struct {
			Name string `json:"name"`
		} `json:"state"`
	} `json:"sets"`
}

// quiesceMembers pauses members ("group/subvolume") of filesystem s.fs as set id and waits
// until all of them are paused; it returns the set's version.
func (c *Controller) quiesceMembers(ctx context.Context, s site, id string, members []string) (int64, error) {
	out, err := c.mgr.Command(ctx, s.mgr, map[string]any{
		"prefix": "fs quiesce", "vol_name": s.fs.Name, "members": members, "set_id": id,
		"timeout": cephFloat(quiesceTimeout.Seconds()), "expiration": cephFloat(quiesceExpiration.Seconds()), "await": true,
	})
	if err != nil {
		return 0, ceph.Wrap("quiesce "+fmt.Sprint(members), err)
	}
	return setState(out, id, "QUIESCED")
}

// releaseMembers ends set id. Success means every member was still paused until the release:
// a set that expired or was cancelled meanwhile fails (EPERM), and the snapshots cut under it
// are not known to be of one point in time.
func (c *Controller) releaseMembers(ctx context.Context, s site, id string, version int64) error {
	cmd := map[string]any{"prefix": "fs quiesce", "vol_name": s.fs.Name, "set_id": id, "release": true, "await": true}
	if version > 0 {
		cmd["if_version"] = version // a member excluded meanwhile changes the version
	}
	out, err := c.mgr.Command(ctx, s.mgr, cmd)
	if err != nil {
		return ceph.Wrap("release quiesce set "+id, err)
	}
	_, err = setState(out, id, "RELEASED")
	return err
}

// setState checks that set id of a reply is in state want and returns its version.
func setState(out []byte, id, want string) (int64, error) {
	var r quiesceReply
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, fmt.Errorf("decode fs quiesce reply: %w", err)
	}
	set, ok := r.Sets[id]
	if !ok {
		return 0, fmt.Errorf("fs quiesce reply has no set %s: %s", id, out)
	}
	if set.State.Name != want {
		return 0, ceph.NewError("fs quiesce", ceph.ErrConflict, fmt.Sprintf("set %s is %s, not %s", id, set.State.Name, want))
	}
	return set.Version, nil
}
