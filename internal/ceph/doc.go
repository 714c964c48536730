// Package ceph owns the driver's connections to Ceph clusters: credentials taken from CSI
// secrets, a shared pool of librados connections, deadline-bounded calls into librados, the
// error vocabulary Ceph errnos map to, and a credential-free monitor reachability probe.
// Nothing here knows about CSI.
package ceph
