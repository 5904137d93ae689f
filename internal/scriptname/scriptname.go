// Package scriptname says which names a command may give as its script: a
// plain file name inside the proxy's scripts directory, the same on every
// proxy. The automator refuses any other at submit, and the proxy again
// before it looks for the file (with the rules of its own OS on top).
package scriptname

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/opsgate/opsgate/internal/printable"
)

// Problem says why name is not a script name a command may give, or ""
// when it is one. Built-ins ("@ping") are not script names: callers
// check those first.
func Problem(name string) string {
	switch {
	case name == "":
		return "empty"
	case name == "." || name == "..":
		return "names a directory"
	case name[0] == '/' || name[0] == '\\':
		return "is an absolute path"
	case strings.ContainsAny(name, `/\`):
		return "contains a path separator"
	case strings.Contains(name, ":"):
		// A drive ("C:x") or an alternate data stream ("x:s") on windows;
		// refused everywhere so a name means the same on every proxy.
		return "contains ':'"
	case !utf8.ValidString(name):
		return "is not valid UTF-8"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "contains a control character"
	case printable.FirstNotShown(name) >= 0:
		// A zero-width space, a bidi override, a no-break space: listings
		// and logs would show another name than the file's (a review),
		// which instance ids refuse too (internal/printable).
		return "contains an invisible, format or separator character (only printable characters and the ASCII space)"
	case name[0] == '-':
		// Harmless for the absolute path the proxy runs, but a trap for
		// every tool (and person) that later passes the name on a
		// command line.
		return "starts with '-'"
	case name[0] == '.':
		// A hidden file (an editor's swap file, a tool's own state) is
		// not a deployed script, whatever its mode.
		return "starts with '.' (a hidden file)"
	case strings.HasSuffix(name, "~"):
		// An editor's backup of a script, which keeps its mode: the
		// script before its last edit.
		return "ends in '~' (an editor's backup)"
	}
	return ""
}
