package nodefence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	cephfsapi "github.com/ceph/go-ceph/cephfs"
	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/fence"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
)

// CephFS finds a node's clients in the MDS session lists of every filesystem of every cluster
// of the map: the node plugin's ceph-fuse mounts announce the node ID in their session metadata
// (mount.NodeMetadataKey), kernel clients their hostname (the node's name unless the kubelet's
// --hostname-override says otherwise). A shared filesystem needs no attachments to find them,
// and the MDS must be asked anyway: fencing ends with the node's sessions evicted, so that the
// capabilities they held (open files, buffered writes) are released at once instead of after
// the session timeout.
type CephFS struct {
	Clusters func() []string
	Connect  Connect
}

// Watch implements Backend: MDS sessions have no informer; a tainted node is reconciled on its
// taint and on every resync.
func (*CephFS) Watch(informers.SharedInformerFactory, func(string)) {}

// session is one MDS client session.
type session struct {
	mds  string
	id   int64
	addr netip.Addr
	node string // metadata: node ID of a ceph-fuse mount of the driver
	host string // metadata: hostname
}

// Clients implements Backend; a cluster it cannot read is reported, the others are returned.
func (b *CephFS) Clients(ctx context.Context, node string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	var errs []error
	for _, id := range b.Clusters() {
		sessions, err := b.sessions(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", id, err))
			continue
		}
		for _, s := range sessions {
			if (s.node == node || (s.node == "" && s.host == node)) && !slices.Contains(out[id], s.addr) {
				out[id] = append(out[id], s.addr)
			}
		}
	}
	return out, errors.Join(errs...)
}

// Cut implements Backend: it evicts every session at the fenced addresses (the MDS blocklists
// each evicted instance too, mds_session_blocklist_on_evict).
func (b *CephFS) Cut(ctx context.Context, clusterID, node string, addrs []netip.Addr) error {
	conn, err := b.Connect(ctx, clusterID)
	if err != nil {
		return err
	}
	defer conn.Release()
	sessions, err := listSessions(ctx, conn)
	if err != nil {
		return err
	}
	for _, s := range sessions {
		if !slices.Contains(addrs, s.addr) {
			continue
		}
		cmd := fmt.Sprintf(`{"prefix":"client evict","filters":["id=%d"]}`, s.id)
		if _, err := mdsCommand(ctx, conn, s.mds, cmd); err != nil {
			return fmt.Errorf("evicting client.%d from mds.%s: %w", s.id, s.mds, err)
		}
		klog.FromContext(ctx).Info("Evicted MDS session of the fenced node", "clusterID", clusterID, "mds", s.mds, "client", s.id, "addr", s.addr)
	}
	return nil
}

func (b *CephFS) sessions(ctx context.Context, clusterID string) ([]session, error) {
	conn, err := b.Connect(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	return listSessions(ctx, conn)
}

// listSessions asks every active MDS of every filesystem for its sessions.
func listSessions(ctx context.Context, conn *ceph.Conn) ([]session, error) {
	out, err := ceph.MonCommand(ctx, conn, map[string]any{"prefix": "fs dump"})
	if err != nil {
		return nil, err
	}
	var dump struct {
		Filesystems []struct {
			MDSMap struct {
				Info map[string]struct {
					Name  string `json:"name"`
					Rank  int    `json:"rank"`
					State string `json:"state"`
				} `json:"info"`
			} `json:"mdsmap"`
		} `json:"filesystems"`
	}
	if err := json.Unmarshal(out, &dump); err != nil {
		return nil, fmt.Errorf("decode fs dump: %w", err)
	}
	var all []session
	for _, fs := range dump.Filesystems {
		for _, mds := range fs.MDSMap.Info {
			if mds.Rank < 0 || mds.State != "up:active" {
				continue
			}
			raw, err := mdsCommand(ctx, conn, mds.Name, `{"prefix":"client ls"}`)
			if err != nil {
				return nil, fmt.Errorf("client ls on mds.%s: %w", mds.Name, err)
			}
			ss, err := parseSessions(mds.Name, raw)
			if err != nil {
				return nil, err
			}
			all = append(all, ss...)
		}
	}
	return all, nil
}

// parseSessions reads `client ls` JSON (Pacific and later: entity.addr is the client's
// address, client_metadata what it announced).
func parseSessions(mds string, raw []byte) ([]session, error) {
	var list []struct {
		ID     int64 `json:"id"`
		Entity struct {
			Addr struct {
				Addr  string `json:"addr"`
				Nonce uint64 `json:"nonce"`
			} `json:"addr"`
		} `json:"entity"`
		Metadata map[string]any `json:"client_metadata"` // strings, and maps (client_features)
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("decode client ls of mds.%s: %w", mds, err)
	}
	var out []session
	for _, s := range list {
		a, _, err := fence.ParseEntityAddr(fmt.Sprintf("%s/%d", s.Entity.Addr.Addr, s.Entity.Addr.Nonce))
		if err != nil {
			return nil, fmt.Errorf("client ls of mds.%s: session %d: %w", mds, s.ID, err)
		}
		node, _ := s.Metadata[mount.NodeMetadataKey].(string)
		host, _ := s.Metadata["hostname"].(string)
		out = append(out, session{mds: mds, id: s.ID, addr: a, node: node, host: host})
	}
	return out, nil
}

// mdsCommand sends a command to one MDS through a libcephfs handle that is initialised but
// never mounted (so it opens no session of its own), on conn's cluster connection.
func mdsCommand(ctx context.Context, conn *ceph.Conn, mds, cmd string) ([]byte, error) {
	return ceph.Call(ctx, conn, "mds."+mds+" command", func(r *rados.Conn) ([]byte, error) {
		m, err := cephfsapi.CreateFromRados(r)
		if err != nil {
			return nil, err
		}
		defer func() { _ = m.Release() }()
		if err := m.Init(); err != nil {
			return nil, err
		}
		out, status, err := m.MdsCommand(mds, [][]byte{[]byte(cmd)})
		if err != nil {
			return nil, ceph.WrapDetail("mds command", err, status)
		}
		return out, nil
	})
}
