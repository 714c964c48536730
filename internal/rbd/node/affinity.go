package node

import (
	"context"

	v1 "github.com/monoceph/monoceph/api/v1"
	"k8s.io/klog/v2"
)

// crushLocation is this node's CRUSH location for cluster's read affinity, "" where that is
// off. Read affinity only moves reads to a nearer OSD: where the location cannot be had, the
// volume is staged reading from primaries, and the reason logged.
func (s *Server) crushLocation(ctx context.Context, cluster v1.Cluster) string {
	if !cluster.ReadAffinity.Enabled {
		return ""
	}
	log := klog.FromContext(ctx)
	if s.opts.NodeLabels == nil {
		log.Info("Read affinity off: this node plugin does not read its Node's labels (--read-node-labels)", "clusterID", cluster.ClusterID)
		return ""
	}
	labels, err := s.opts.NodeLabels(ctx)
	if err != nil {
		log.Error(err, "Read affinity off: reading the node's labels failed", "clusterID", cluster.ClusterID)
		return ""
	}
	loc := cluster.ReadAffinity.CrushLocation(labels)
	if loc == "" {
		log.Info("Read affinity off: the node has none of the cluster's crushLocationLabels", "clusterID", cluster.ClusterID,
			"labels", cluster.ReadAffinity.CrushLocationLabels)
	}
	return loc
}
