// Package version holds the build's version, set by the Makefile with
// -ldflags "-X github.com/opsgate/opsgate/version.Version=...".
package version

import "runtime"

// Version of this build; "dev" when built without the Makefile.
var Version = "dev"

// Line is what `PROGRAM version` prints: the program, this build's version,
// and the Go release and platform it was built with and for.
func Line(program string) string {
	return program + " " + Version + " (" + runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}
