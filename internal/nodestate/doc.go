// Package nodestate keeps what a CSI node service must find again after a restart: the JSON
// staging record written atomically next to each staging path, and the per-volume work
// directory under the state directory whose index links back to it.
//
// A record lives next to the staging path (<path>.monoceph.json), not inside it: the staging
// path is covered by whatever is mounted on it. Calls that carry only a volume ID find the
// record through the volume's work directory, named by a hash of the volume ID.
package nodestate
