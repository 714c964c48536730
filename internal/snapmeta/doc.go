// Package snapmeta serves changed block tracking (CSI SnapshotMetadata, KEP-3314) for RBD
// snapshots: the allocated extents of one snapshot and the extents changed between two
// snapshots of the same image, computed by librbd's diff iteration and streamed as librbd
// produces them. A delta starts from the base snapshot's ID (rbd_diff_iterate3) where the
// process's librbd has it (Reef 18.2.5+, Squid 19.2.3+, Tentacle: looked up at run time, so
// one binary serves every release), which reaches snapshots outside the user namespace (the
// trash, group snapshots' members); elsewhere from its name (rbd_diff_iterate2, Ceph 16.2).
//
// One Engine does the work; the CSI SnapshotMetadata service on the CSI socket drives it
// directly.
//
// Output rules (CSI spec, "Snapshot Metadata Service RPCs"):
//
//   - VARIABLE_LENGTH by default: the exact byte ranges librbd reports, ascending,
//     non-overlapping, adjacent ranges coalesced. RADOS tracks overwrites within an object at
//     byte granularity (clone overlap), so a 4 KiB write is a 4 KiB extent, and a backup reads
//     only what changed. Objects that did not exist in the base snapshot (or, for allocated
//     queries, at all) are reported from their start to their end, as RADOS knows no holes
//     inside an object.
//   - FIXED_LENGTH on request (Options.Style): the same extents rounded out to whole RADOS
//     objects (the image's stripe unit, 4 MiB by default), one tuple per block. For backup
//     tools that only handle fixed blocks; it costs reading up to a whole object per small
//     change. The last block keeps the full block size even where the volume ends inside it.
//   - starting_offset resumes a stream: a VARIABLE_LENGTH extent containing it is clipped to
//     start at it; a FIXED_LENGTH block containing it is sent whole. An offset at or past the
//     volume's size (or negative) is OUT_OF_RANGE.
//   - max_results caps every message (0 means DefaultMaxResults; values above MaxResultsCap
//     are lowered to it, which the spec allows).
//
// Memory stays bounded whatever the number of extents: librbd's callback (C, in librbd.go)
// collects up to 1024 extents and hands them to Go in one call, which coalesces them into
// messages and queues those for the gRPC send loop on a channel of QueueDepth messages,
// blocking when it is full. When the client goes away the callback returns -ECANCELED, which
// stops librbd's iteration, and the image is closed. Batching in C matters: go-ceph's
// DiffIterate calls into Go once per extent.
package snapmeta
