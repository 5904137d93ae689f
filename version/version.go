// Package version holds the build's version, set by the Makefile with
// -ldflags "-X github.com/opsgate/opsgate/version.Version=...".
package version

import (
	"runtime"
	"runtime/debug"
)

// Version of this build; "dev" when built without the Makefile.
var Version = "dev"

// Line is what `PROGRAM version` prints: the program, this build's version,
// and the Go release and platform it was built with and for. A build
// without the Makefile ("dev") is named by the commit it was built from,
// when the Go toolchain recorded one (go build in a clone does).
func Line(program string) string {
	v := Version
	if v == "dev" {
		if rev := vcsRevision(); rev != "" {
			v = "dev-" + rev
		}
	}
	return program + " " + v + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

// vcsRevision is the short commit the toolchain recorded, "-dirty" when
// the tree had changes, or "".
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}
