// Package version tells which monoceph this binary is.
package version

import "runtime/debug"

// version is set at link time: -ldflags "-X github.com/monoceph/monoceph/internal/version.version=v1.2.3".
var version string

// Get returns the release version, else the module version or VCS revision from build info.
func Get() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			return v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel-" + s.Value[:12]
			}
		}
	}
	return "devel"
}
