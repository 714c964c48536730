// Package fence serves the csi-addons Identity and FenceController services on Ceph OSD
// blocklist entries.
//
// A fenced CIDR becomes one `osd blocklist range` entry (Ceph 16.2.15 and later), so a /16 costs
// one monitor commit, not 65,536. Monitors without range support get one whole-address entry
// per address instead, for small ranges only. Every fence and unfence first lists the
// blocklist and changes only what is missing or present, so both are idempotent and a repeated
// call costs no monitor commit (each commit waits up to paxos_propose_interval, 1 s).
package fence
