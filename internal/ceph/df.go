package ceph

import (
	"context"
	"encoding/json"
	"fmt"
)

// PoolMaxAvail reads `ceph df`'s max_avail of a pool: what can still be written to it, after
// replication and the full ratio.
func PoolMaxAvail(ctx context.Context, conn *Conn, pool string) (int64, error) {
	out, err := MonCommand(ctx, conn, map[string]any{"prefix": "df"})
	if err != nil {
		return 0, err
	}
	var df struct {
		Pools []struct {
			Name  string `json:"name"`
			Stats struct {
				MaxAvail int64 `json:"max_avail"`
			} `json:"stats"`
		} `json:"pools"`
	}
	if err := json.Unmarshal(out, &df); err != nil {
		return 0, fmt.Errorf("decode ceph df: %w", err)
	}
	for _, p := range df.Pools {
		if p.Name == pool {
			return p.Stats.MaxAvail, nil
		}
	}
	return 0, NewError("ceph df", ErrNotFound, fmt.Sprintf("pool %q does not exist", pool))
}
