package cli

import (
	"fmt"

	"github.com/opsgate/opsgate/internal/winacl"
)

// looseScriptsWarning is what the proxy logs at start, and status says,
// when writableByOthers lists anything.
const looseScriptsWarning = "users other than the scripts' owners may change what this proxy runs, as its user: keep scripts_dir, the folders above it and its scripts writable by SYSTEM and Administrators only (docs/install-proxy.md gives the icacls.exe line)"

// writableByOthers lists what lets users other than the scripts' owners
// choose the programs that the scripts directory dir runs (as the proxy's
// user, LocalSystem for the service): a path of scriptPaths whose access
// list lets someone other than SYSTEM, Administrators, TrustedInstaller
// or the proxy's own account change it (winacl.Others: for the scripts
// directory and a directory inside it holding a script, adding files,
// deleting or renaming entries, changing the access list or owner, or
// removing it; for a directory above it, only what replaces the path
// below it; for a script, writing it). Each entry names the path and who
// may do what. A path whose access list cannot be read is left out.
func writableByOthers(dir string) []string {
	trusted := winacl.Trusted(winacl.Self())
	var found []string
	for _, p := range scriptPaths(dir) {
		d, err := winacl.Read(p.path)
		if err != nil {
			continue
		}
		role := winacl.Folder
		switch p.kind {
		case aboveScriptsDir:
			role = winacl.Above
		case aScript:
			role = winacl.File
		}
		if grants := winacl.Others(d, role, trusted); len(grants) > 0 {
			found = append(found, fmt.Sprintf("%s: writable by %s", p.path, winacl.Describe(grants, winacl.Name)))
		}
	}
	return found
}

// writableByOthersAs is writableByOthers for `proxy status`: on windows
// the accounts allowed are the same whoever asks.
func writableByOthersAs(dir, _ string) []string { return writableByOthers(dir) }

// unreadable is "" on windows: a script runs as whoever may read it, and
// its access list is what writableByOthers reads.
func unreadable(string) string { return "" }
