// Package fence serves the csi-addons Identity and FenceController services; the OSD
// blocklist entries they create, list and remove are internal/blocklist's.
package fence
