package cephfs

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/ceph/go-ceph/cephfs/admin"
	"github.com/ceph/go-ceph/rados"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/journal"
)

// filesystem is one CephFS of a cluster.
type filesystem struct {
	Name         string
	ID           int64
	MetadataPool string
	DataPools    []string
}

// fsCache remembers `fs dump` per cluster for a short while: every RPC needs the filesystem's
// ID or metadata pool, and filesystems are created and removed rarely.
type fsCache struct {
	mu      sync.Mutex
	entries map[string]fsCacheEntry
}

type fsCacheEntry struct {
	fss     []filesystem
	fetched time.Time
}

const fsCacheTTL = 30 * time.Second

func (c *fsCache) get(ctx context.Context, clusterID string, conn *ceph.Conn, fresh bool) ([]filesystem, error) {
	c.mu.Lock()
	e, ok := c.entries[clusterID]
	c.mu.Unlock()
	if ok && !fresh && time.Since(e.fetched) < fsCacheTTL {
		return e.fss, nil
	}
	fss, err := dumpFilesystems(ctx, conn)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]fsCacheEntry{}
	}
	c.entries[clusterID] = fsCacheEntry{fss: fss, fetched: time.Now()}
	c.mu.Unlock()
	return fss, nil
}

// lookup finds a filesystem by name (id < 0) or by ID, re-reading the map once on a miss.
func (c *fsCache) lookup(ctx context.Context, clusterID string, conn *ceph.Conn, name string, id int64) (filesystem, error) {
	for _, fresh := range []bool{false, true} {
		fss, err := c.get(ctx, clusterID, conn, fresh)
		if err != nil {
			return filesystem{}, err
		}
		for _, f := range fss {
			if (id < 0 && f.Name == name) || (id >= 0 && f.ID == id) {
				return f, nil
			}
		}
	}
	what := fmt.Sprintf("filesystem %q", name)
	if id >= 0 {
		what = fmt.Sprintf("filesystem with ID %d", id)
	}
	return filesystem{}, ceph.NewError("look up filesystem", ceph.ErrNotFound, what+" does not exist")
}

func dumpFilesystems(ctx context.Context, conn *ceph.Conn) ([]filesystem, error) {
	out, err := ceph.MonCommand(ctx, conn, map[string]any{"prefix": "fs dump"})
	if err != nil {
		return nil, err
	}
	var dump struct {
		Filesystems []struct {
			ID     int64 `json:"id"`
			MDSMap struct {
				FSName       string  `json:"fs_name"`
				MetadataPool int64   `json:"metadata_pool"`
				DataPools    []int64 `json:"data_pools"`
			} `json:"mdsmap"`
		} `json:"filesystems"`
	}
	if err := json.Unmarshal(out, &dump); err != nil {
		return nil, fmt.Errorf("decode fs dump: %w", err)
	}
	return ceph.Call(ctx, conn, "resolve pools", func(r *rados.Conn) ([]filesystem, error) {
		var fss []filesystem
		for _, f := range dump.Filesystems {
			meta, err := r.GetPoolByID(f.MDSMap.MetadataPool)
			if err != nil {
				return nil, err
			}
			fs := filesystem{Name: f.MDSMap.FSName, ID: f.ID, MetadataPool: meta}
			for _, id := range f.MDSMap.DataPools {
				if name, err := r.GetPoolByID(id); err == nil {
					fs.DataPools = append(fs.DataPools, name)
				}
			}
			fss = append(fss, fs)
		}
		return fss, nil
	})
}

// site is one RPC's view of a filesystem: its connections, the volumes-module client bound to
// the RPC's deadline, and where the journal lives.
type site struct {
	conn      *ceph.Conn // RADOS objects and monitor commands
	mgr       *ceph.Conn // manager commands (see ceph.Pool.GetForMgr)
	fs        filesystem
	admin     *admin.FSAdmin
	namespace string
	// group is the cluster map's subvolume group: where ceph-csi's volumes are (ceph-csi takes
	// the group from the same key of its config.json)
	group string
}

func (s site) journal() journal.Location { return journalAt(s.conn, s.fs, s.namespace) }

func journalAt(conn *ceph.Conn, fs filesystem, namespace string) journal.Location {
	return journal.Location{Conn: conn, Pool: fs.MetadataPool, Namespace: namespace}
}

func (s site) release() {
	s.conn.Release()
	s.mgr.Release()
}

// openSite connects for one RPC and resolves the filesystem, by name (fscid < 0) or by ID.
func (c *Controller) openSite(ctx context.Context, cl v1.Cluster, secrets map[string]string, name string, fscid int64) (site, error) {
	conn, err := c.Connect(ctx, cl, secrets)
	if err != nil {
		return site{}, err
	}
	fs, err := c.fss.lookup(ctx, cl.ClusterID, conn, name, fscid)
	if err != nil {
		conn.Release()
		return site{}, err
	}
	mgr, err := c.ConnectMgr(ctx, cl, secrets)
	if err != nil {
		conn.Release()
		return site{}, err
	}
	return site{conn: conn, mgr: mgr, fs: fs, admin: admin.NewFromConn(ceph.NewCommander(ctx, mgr)), namespace: journalNamespace(cl),
		group: cl.SubvolumeGroupOrDefault()}, nil
}

func isNotFound(err error) bool { return ceph.Is(err, ceph.ErrNotFound) }
