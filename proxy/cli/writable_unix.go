//go:build !windows

package cli

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opsgate/opsgate/internal/secretfile"
	"github.com/opsgate/opsgate/proxy/runner"
)

// writableByOthers lists what lets users other than the scripts' owners
// choose the programs that the scripts directory dir runs (as the proxy's
// user, often root): dir, a directory above it, a runnable script in it
// (its real path, as runner.ResolveScript gives it) or a directory inside
// dir holding one (a link's target), that every user may write to, or a
// group other than root's. A directory above dir or inside it with the
// sticky bit (/var/tmp, say) is not listed: there no one may rename or
// replace what is not theirs. Each entry names the path, who may write it
// and its mode. Empty when dir cannot be read.
func writableByOthers(dir string) []string {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return nil
	}
	var found []string
	note := func(path string, fi fs.FileInfo, other bool) {
		if w := writers(fi, other); w != "" {
			found = append(found, fmt.Sprintf("%s: writable by %s (mode %v)", path, w, fi.Mode()))
		}
	}
	for p := real; ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil {
			note(p, fi, p != real)
		}
		if filepath.Dir(p) == p {
			break
		}
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return found
	}
	inside := map[string]bool{}
	for _, e := range entries {
		path, err := runner.ResolveScript(real, e.Name())
		if err != nil {
			continue // not runnable
		}
		if fi, err := os.Stat(path); err == nil {
			note(path, fi, false)
		}
		// A link's target in a directory inside dir: who may write that
		// directory may put another file in the script's place (unless
		// its sticky bit keeps them from renaming what is not theirs).
		for d := filepath.Dir(path); d != real && !inside[d]; d = filepath.Dir(d) {
			inside[d] = true
			if fi, err := os.Stat(d); err == nil {
				note(d, fi, true)
			}
		}
	}
	return found
}

// writers says who, beyond its owner and root, may write fi ("" for no
// one): every user, or a group other than root's. other says fi is a
// directory other than the scripts directory (above it, or inside it
// holding a script), where the sticky bit keeps others from renaming what
// is not theirs.
func writers(fi fs.FileInfo, other bool) string {
	if other && fi.Mode()&fs.ModeSticky != 0 {
		return ""
	}
	return secretfile.Others(fi, true)
}
