// Package blocklist fences and unfences CIDRs with Ceph OSD blocklist entries: the entries,
// their parsing and listing, the fence records, the self-fencing guard, and Direct for callers
// inside the driver. It is a library: the csi-addons FenceController (internal/fence) and
// nodefence fence through it; the RBD controller and node read the blocklist through it, and
// rbd/holder parses client addresses with it.
//
// A fenced CIDR becomes one `osd blocklist range` entry (Ceph 16.2.15 and later), so a /16 costs
// one monitor commit, not 65,536. Monitors without range support get one whole-address entry
// per address instead, for small ranges only. Every fence and unfence first lists the
// blocklist and changes only what is missing or present, so both are idempotent and a repeated
// call costs no monitor commit (each commit waits up to paxos_propose_interval, 1 s).
package blocklist
