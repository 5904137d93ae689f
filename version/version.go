// Package version holds the build's version, set by the Makefile with
// -ldflags "-X github.com/opsgate/opsgate/version.Version=...".
package version

// Version of this build; "dev" when built without the Makefile.
var Version = "dev"
