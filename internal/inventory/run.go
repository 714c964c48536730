package inventory

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ceph/go-ceph/rados"
	v1 "github.com/monoceph/monoceph/api/v1"
	"github.com/monoceph/monoceph/internal/ceph"
	"github.com/monoceph/monoceph/internal/radosop"
	"github.com/monoceph/monoceph/internal/rbd/topopool"
	"github.com/monoceph/monoceph/internal/volid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Place is one RBD pool and RADOS namespace of a cluster to scan.
type Place struct {
	Cluster   v1.Cluster
	Pool      string
	Namespace string
}

func (p Place) key() string { return p.Cluster.ClusterID + "/" + p.Pool + "/" + p.Namespace }

// Places finds where volumes can be: every RBD StorageClass of drivers names its cluster, pool
// (or the pools of its topologyConstrainedPools) and namespace (the cluster map's default
// namespace when it names none); extra pools are added on every cluster of the map.
func Places(ctx context.Context, kc kubernetes.Interface, clusters v1.ClusterMap, drivers map[string]bool, extraPools []string) ([]Place, error) {
	byID := map[string]v1.Cluster{}
	for _, c := range clusters {
		byID[c.ClusterID] = c
	}
	seen := map[string]bool{}
	var out []Place
	add := func(p Place) {
		if !seen[p.key()] {
			seen[p.key()] = true
			out = append(out, p)
		}
	}
	if kc != nil {
		scs, err := kc.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list StorageClasses: %w", err)
		}
		for _, sc := range scs.Items {
			c, ok := byID[sc.Parameters["clusterID"]]
			if !drivers[sc.Provisioner] || !ok {
				continue
			}
			ns, set := sc.Parameters["radosNamespace"]
			if !set {
				ns = c.RBD.RadosNamespace
			}
			var pools []string
			if p := sc.Parameters["pool"]; p != "" {
				pools = append(pools, p)
			}
			if tp := sc.Parameters["topologyConstrainedPools"]; tp != "" {
				names, err := topopool.Names(tp)
				if err != nil {
					return nil, fmt.Errorf("StorageClass %s: %w", sc.Name, err)
				}
				pools = append(pools, names...)
			}
			for _, p := range pools {
				add(Place{Cluster: c, Pool: p, Namespace: ns})
			}
		}
	}
	for _, c := range clusters {
		for _, p := range extraPools {
			add(Place{Cluster: c, Pool: p, Namespace: c.RBD.RadosNamespace})
		}
	}
	slices.SortFunc(out, func(a, b Place) int { return strings.Compare(a.key(), b.key()) })
	return out, nil
}

// Connector opens a connection to a cluster (with the caller's Ceph user).
type Connector func(ctx context.Context, c v1.Cluster) (*ceph.Conn, error)

// Scan lists every place's objects and returns them with a predicate that says whether a
// handle points into a scanned place (for Join's dangling rule).
func Scan(ctx context.Context, places []Place, connect Connector) ([]Object, func(string) bool, error) {
	var objs []Object
	scanned := map[string]bool{}
	for _, p := range places {
		got, poolID, err := scanPlace(ctx, p, connect)
		if err != nil {
			return nil, nil, fmt.Errorf("cluster %s pool %s: %w", p.Cluster.ClusterID, p.Pool, err)
		}
		scanned[fmt.Sprintf("%s/%d/%s", p.Cluster.ClusterID, poolID, p.Namespace)] = true
		objs = append(objs, got...)
	}
	return objs, func(h string) bool { k, ok := covered(h); return ok && scanned[k] }, nil
}

func scanPlace(ctx context.Context, p Place, connect Connector) ([]Object, int64, error) {
	conn, err := connect(ctx, p.Cluster)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Release()
	poolID, err := ceph.Call(ctx, conn, "look up pool", func(r *rados.Conn) (int64, error) { return r.GetPoolByName(p.Pool) })
	if err != nil {
		return nil, 0, err
	}
	objs, err := ScanRBD(ctx, radosop.Location{Conn: conn, Pool: p.Pool, Namespace: p.Namespace}, p.Cluster.ClusterID, poolID)
	return objs, poolID, err
}

// covered parses a monoceph handle into its cluster/poolID/namespace key.
func covered(handle string) (string, bool) {
	if v, err := volid.ParseRBDVolume(handle); err == nil {
		return fmt.Sprintf("%s/%d/%s", v.ClusterID, v.PoolID, v.Namespace), true
	}
	if s, err := volid.ParseRBDSnapshot(handle); err == nil {
		return fmt.Sprintf("%s/%d/%s", s.ClusterID, s.PoolID, s.Namespace), true
	}
	return "", false
}

// Deleter deletes a volume or snapshot by its CSI handle, through the controller's own path.
type Deleter func(ctx context.Context, e Entry) error

// DeleteOrphans deletes the entries Deletable allows for the Kubernetes cluster named cluster
// (only reports them when dryRun) and returns the ones it deleted or would delete.
func DeleteOrphans(ctx context.Context, entries []Entry, now time.Time, grace time.Duration, cluster string, dryRun bool, del Deleter) ([]Entry, error) {
	var done []Entry
	for _, e := range entries {
		if !Deletable(e, now, grace, cluster) {
			continue
		}
		if !dryRun {
			if err := del(ctx, e); err != nil {
				return done, fmt.Errorf("delete %s %s: %w", e.Kind, e.Handle, err)
			}
		}
		done = append(done, e)
	}
	return done, nil
}

// Write prints entries as a table, as JSON ("json") or as counts in Prometheus' text format
// ("prometheus").
func Write(w io.Writer, format string, entries []Entry) error {
	if format == "prometheus" {
		return WriteMetrics(w, entries)
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if entries == nil {
			entries = []Entry{}
		}
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "STATE\tCLUSTER\tPOOL\tNAMESPACE\tKIND\tOBJECT\tPV\tCLAIM\tNODE\tCREATED")
	for _, e := range entries {
		created := ""
		if !e.Created.IsZero() {
			created = e.Created.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.State, dash(e.Cluster), dash(e.Pool), dash(e.Namespace), e.Kind,
			dash(e.Object), dash(e.PV), dash(e.Claim), dash(e.Node), dash(created))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
