// Package version says which build of flagedge is running: both binaries print it for
// --version and export it as the flagedge_build_info metric.
package version

import "runtime/debug"

// Version and Commit are set at build time (make build, the Dockerfile) with
// -ldflags "-X github.com/flagedge/flagedge/internal/version.Version=… -X ….Commit=…". A
// plain go build leaves them empty, and they are read from the module's build information.
var (
	Version string
	Commit  string
)

// Get returns the version and the commit, "dev" and "unknown" when neither the build nor the
// module information says.
func Get() (version, commit string) {
	version, commit = Version, Commit
	if info, ok := debug.ReadBuildInfo(); ok {
		if version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			version = info.Main.Version
		}
		for _, s := range info.Settings {
			if commit == "" && s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	if version == "" {
		version = "dev"
	}
	if commit == "" {
		commit = "unknown"
	}
	return version, commit
}

// String is what --version prints: "flagedge <version> <commit>".
func String() string {
	v, c := Get()
	return "flagedge " + v + " " + c
}
