// Package v1 holds the versioned types of monoceph's own configuration: the cluster map that
// tells the driver which Ceph clusters it serves and their per-cluster defaults.
//
// The JSON shape follows ceph-csi's config.json so that existing ConfigMaps keep working:
//
//	[
//	  {
//	    "clusterID": "prod",
//	    "monitors": ["10.0.0.1:6789", "10.0.0.2:6789"],
//	    "cephFS": {"subvolumeGroup": "csi", "radosNamespace": "csi"},
//	    "rbd": {"radosNamespace": "k8s"}
//	  }
//	]
package v1
