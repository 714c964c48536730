package nodefence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"

	cephfsapi "github.com/ceph/go-ceph/cephfs"
	"github.com/ceph/go-ceph/rados"
	"github.com/monoceph/monoceph/internal/blocklist"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/cephfs/mount"
	"github.com/monoceph/monoceph/internal/cephfs/volumecontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// CephFS finds a node's clients in the MDS session lists of the filesystems the driver's
// PersistentVolumes use: the node plugin's ceph-fuse mounts announce the node ID in their
// session metadata (mount.NodeMetadataKey), kernel clients their hostname (the node's name
// unless the kubelet's --hostname-override says otherwise). A shared filesystem needs no
// attachments to find them, and the MDS must be asked anyway: fencing ends with the node's
// sessions evicted, so that the capabilities they held (open files, buffered writes) are
// released at once instead of after the session timeout.
//
// What a session announces is whatever its client sends, and a Ceph cluster may serve several
// Kubernetes clusters with the same generic node names, so a session counts as the node's only
// if monoceph could have made it: its authenticated Ceph user is the node-stage user of one of
// the driver's PVs (the MDS filters `client ls` by the name cephx authenticated, not by the
// entity the client announces), it is on that PV's filesystem, and its root is at or under
// that PV's root path. A session that announces no root does not count: ceph-fuse and
// libcephfs announce theirs ("/" when mounting the filesystem root), and so has the Linux
// client since 4.x (mds_client.c's session metadata: hostname, kernel_version, entity_id, root),
// so such a session is no client the driver starts, and the node-stage user's key (which may
// be shared by another Kubernetes cluster's nodes) is all that would tie it to a PV. The fencer
// then keeps only the tainted Node's addresses.
//
// What the MDS tells of a session's user (seen on Pacific 16.2.15; Ceph's main branch dumps a
// session the same way, Session::dump and session_info_t::dump): `client ls` (= `session ls`)
// carries no authenticated name. entity.name is client.<global ID>, a number the monitors
// hand out; client_metadata.entity_id is what the client announces (a ceph-fuse run as one
// user announced entity_id=csi-node and was listed so). The MDS does know the name cephx
// authenticated (Session::info.auth_name, set from the connection's peer name when it
// authenticates), and uses it only to filter: `client ls auth_name=<ID>` (the ID without
// "client.") keeps the sessions whose authenticated ID matches, whatever they announce
// (there, auth_name=csi-node and auth_name=client.<ID> listed none of that session). So the
// user of a session is the filter it was listed under, never a field of the listing.
type CephFS struct {
	Driver string
	// Kube lists the driver's PVs and reads the node-stage Secrets they name (their user IDs
	// only; the keys are never kept).
	Kube     kubernetes.Interface
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
	root string // metadata: the directory mounted ("" when the client does not say)
	fs   string // the filesystem whose MDS listed it ("" when the listing was unscoped)
	user string // the authenticated user the listing was filtered by ("": unfiltered)
}

// grant is what one PV lets a session be: the Ceph user its node-stage Secret names, mounting
// at or under the PV's root path.
type grant struct{ user, root string }

// scope is what the driver's PVs let sessions be: cluster ID → filesystem name → grants.
type scope map[string]map[string][]grant

func (sc scope) add(clusterID, fs string, g grant) {
	if sc[clusterID] == nil {
		sc[clusterID] = map[string][]grant{}
	}
	if !slices.Contains(sc[clusterID][fs], g) {
		sc[clusterID][fs] = append(sc[clusterID][fs], g)
	}
}

// grantUsers are the distinct users of grants, in order.
func grantUsers(grants []grant) []string {
	var out []string
	for _, g := range grants {
		if !slices.Contains(out, g.user) {
			out = append(out, g.user)
		}
	}
	slices.Sort(out)
	return out
}

// attributed reports whether s is one of node's sessions that monoceph could have made on its
// filesystem, whose grants are given.
func (s session) attributed(node string, grants []grant) bool {
	if s.node != node && (s.node != "" || s.host != node) {
		return false
	}
	return slices.ContainsFunc(grants, func(g grant) bool {
		return s.user != "" && g.user == s.user && under(s.root, g.root)
	})
}

// under reports whether p is root or below it (both absolute; p is cleaned first, so that
// "/volumes/g/v/../../x" is not taken for a path under /volumes/g).
func under(p, root string) bool {
	if !strings.HasPrefix(p, "/") || !strings.HasPrefix(root, "/") {
		return false
	}
	p, root = path.Clean(p), path.Clean(root)
	return root == "/" || p == root || strings.HasPrefix(p, root+"/")
}

// scope reads the grants of the driver's PVs on the clusters of the map. A PV whose
// node-stage user cannot be read is reported, the others are returned.
func (b *CephFS) scope(ctx context.Context) (scope, error) {
	list, err := b.Kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing PersistentVolumes: %w", err)
	}
	clusters := b.Clusters()
	sc := scope{}
	type result struct {
		user string
		err  error
	}
	secrets := map[string]result{} // namespace/name → the node-stage user it holds
	var errs []error
	for _, pv := range list.Items {
		csi := pv.Spec.CSI
		if csi == nil || csi.Driver != b.Driver {
			continue
		}
		v, err := volumecontext.Parse(csi.VolumeAttributes)
		if err != nil {
			errs = append(errs, fmt.Errorf("PersistentVolume %s: %w", pv.Name, err))
			continue
		}
		if !slices.Contains(clusters, v.ClusterID) {
			continue // a cluster this driver cannot reach, whose sessions it could not cut
		}
		ref := csi.NodeStageSecretRef
		if ref == nil {
			errs = append(errs, fmt.Errorf("PersistentVolume %s names no node-stage Secret: its Ceph user, and so its sessions, are unknown", pv.Name))
			continue
		}
		key := ref.Namespace + "/" + ref.Name
		r, ok := secrets[key]
		if !ok {
			r.user, r.err = b.nodeStageUser(ctx, ref.Namespace, ref.Name)
			secrets[key] = r
		}
		if r.err != nil {
			errs = append(errs, fmt.Errorf("PersistentVolume %s: %w", pv.Name, r.err))
			continue
		}
		sc.add(v.ClusterID, v.FSName, grant{user: r.user, root: v.RootPath})
	}
	return sc, errors.Join(errs...)
}

// nodeStageUser is the Ceph user a node-stage Secret holds, read in the order the CephFS
// node reads it (ceph.AdminFirst).
func (b *CephFS) nodeStageUser(ctx context.Context, namespace, name string) (string, error) {
	s, err := b.Kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading node-stage Secret %s/%s: %w", namespace, name, err)
	}
	data := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		data[k] = string(v)
	}
	cred, err := ceph.CredentialsFromSecrets(data, ceph.AdminFirst...)
	if err != nil {
		return "", fmt.Errorf("node-stage Secret %s/%s: %w", namespace, name, err)
	}
	return cred.ID, nil
}

// Clients implements Backend; a cluster or PV it cannot read is reported, the others are
// returned.
func (b *CephFS) Clients(ctx context.Context, node string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	sc, err := b.scope(ctx)
	errs := []error{err}
	for _, id := range b.Clusters() {
		fss := sc[id]
		if len(fss) == 0 {
			continue
		}
		sessions, err := b.sessions(ctx, id, fss, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", id, err))
			continue
		}
		for _, s := range sessions {
			if s.attributed(node, fss[s.fs]) && !slices.Contains(out[id], s.addr) {
				out[id] = append(out[id], s.addr)
			}
		}
	}
	return out, errors.Join(errs...)
}

// Cut implements Backend: it evicts every session at the fenced addresses on the filesystems
// the driver's PVs use there (the MDS blocklists each evicted instance too,
// mds_session_blocklist_on_evict). Sessions of other users at those addresses are evicted too:
// the OSD blocklist has cut them off already, and their capabilities are released at once.
func (b *CephFS) Cut(ctx context.Context, clusterID, node string, addrs []netip.Addr) error {
	sc, err := b.scope(ctx)
	if err != nil && len(sc[clusterID]) == 0 {
		return err
	}
	sessions, err := b.sessions(ctx, clusterID, sc[clusterID], false)
	if err != nil {
		return err
	}
	conn, err := b.Connect(ctx, clusterID)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, s := range sessions {
		if !slices.Contains(addrs, s.addr) {
			continue
		}
		cmd, _ := json.Marshal(map[string]any{"prefix": "client evict", "filters": []string{fmt.Sprintf("id=%d", s.id)}})
		if _, err := mdsCommand(ctx, conn, s.mds, string(cmd)); err != nil {
			return fmt.Errorf("evicting client.%d from mds.%s: %w", s.id, s.mds, err)
		}
		klog.FromContext(ctx).Info("Evicted MDS session of the fenced node", "clusterID", clusterID, "mds", s.mds, "client", s.id, "addr", s.addr)
	}
	return nil
}

// sessions lists the sessions of the filesystems of fss on a cluster; byUser asks each MDS
// for the sessions of the grants' users only (`client ls auth_name=<user>`).
func (b *CephFS) sessions(ctx context.Context, clusterID string, fss map[string][]grant, byUser bool) ([]session, error) {
	if len(fss) == 0 {
		return nil, nil
	}
	conn, err := b.Connect(ctx, clusterID)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	filters := map[string][]string{}
	for fs, grants := range fss {
		filters[fs] = nil
		if byUser {
			filters[fs] = grantUsers(grants)
		}
	}
	return listSessions(ctx, conn, filters)
}

// listSessions asks every active MDS of the filesystems named in users for its sessions: the
// sessions each user authenticated as, or all when a filesystem has no users listed. A nil
// map lists every filesystem's sessions.
func listSessions(ctx context.Context, conn *ceph.Conn, users map[string][]string) ([]session, error) {
	out, err := ceph.MonCommand(ctx, conn, map[string]any{"prefix": "fs dump"})
	if err != nil {
		return nil, err
	}
	queries, err := mdsQueries(out, users)
	if err != nil {
		return nil, err
	}
	var all []session
	for _, q := range queries {
		req := map[string]any{"prefix": "client ls"}
		if q.user != "" {
			req["filters"] = []string{"auth_name=" + q.user}
		}
		cmd, _ := json.Marshal(req)
		raw, err := mdsCommand(ctx, conn, q.mds, string(cmd))
		if err != nil {
			return nil, fmt.Errorf("client ls on mds.%s: %w", q.mds, err)
		}
		ss, err := parseSessions(q.mds, raw)
		if err != nil {
			return nil, err
		}
		for i := range ss {
			ss[i].fs, ss[i].user = q.fs, q.user
		}
		all = append(all, ss...)
	}
	return all, nil
}

// mdsQuery is one `client ls` to send: to active MDS mds of filesystem fs, for the sessions
// that authenticated as user ("": every session).
type mdsQuery struct{ mds, fs, user string }

// mdsQueries reads `fs dump` and plans the `client ls` of listSessions, in a stable order:
// only the filesystems users names (every one when users is nil; the MDS of a filesystem the
// driver has no PV on is never asked, so its sessions are neither attributed nor evicted),
// only their active ranks (a standby-replay MDS has a rank but holds no sessions to act on).
func mdsQueries(fsDump []byte, users map[string][]string) ([]mdsQuery, error) {
	var dump struct {
		Filesystems []struct {
			MDSMap struct {
				FSName string `json:"fs_name"`
				Info   map[string]struct {
					Name  string `json:"name"`
					Rank  int    `json:"rank"`
					State string `json:"state"`
				} `json:"info"`
			} `json:"mdsmap"`
		} `json:"filesystems"`
	}
	if err := json.Unmarshal(fsDump, &dump); err != nil {
		return nil, fmt.Errorf("decode fs dump: %w", err)
	}
	var out []mdsQuery
	for _, fs := range dump.Filesystems {
		names, scoped := users[fs.MDSMap.FSName]
		if users != nil && !scoped {
			continue
		}
		if len(names) == 0 {
			names = []string{""}
		}
		for _, mds := range fs.MDSMap.Info {
			if mds.Rank < 0 || mds.State != "up:active" {
				continue
			}
			for _, u := range names {
				out = append(out, mdsQuery{mds: mds.Name, fs: fs.MDSMap.FSName, user: u})
			}
		}
	}
	slices.SortFunc(out, func(a, b mdsQuery) int {
		return cmp.Or(strings.Compare(a.fs, b.fs), strings.Compare(a.mds, b.mds), strings.Compare(a.user, b.user))
	})
	return out, nil
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
		a, _, err := blocklist.ParseEntityAddr(fmt.Sprintf("%s/%d", s.Entity.Addr.Addr, s.Entity.Addr.Nonce))
		if err != nil {
			return nil, fmt.Errorf("client ls of mds.%s: session %d: %w", mds, s.ID, err)
		}
		node, _ := s.Metadata[mount.NodeMetadataKey].(string)
		host, _ := s.Metadata["hostname"].(string)
		root, _ := s.Metadata["root"].(string)
		out = append(out, session{mds: mds, id: s.ID, addr: a, node: node, host: host, root: root})
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
