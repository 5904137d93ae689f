package cli

import (
	"os"
	"path/filepath"

	"github.com/opsgate/opsgate/proxy/runner"
)

// scriptPathKind is what a path is to the scripts directory.
type scriptPathKind int

const (
	theScriptsDir scriptPathKind = iota
	aboveScriptsDir
	aScript
	// insideScriptsDir is a directory inside the scripts directory that
	// holds a script (a link's target).
	insideScriptsDir
)

// scriptPath is a path whose writers choose what the scripts directory
// runs.
type scriptPath struct {
	path string
	kind scriptPathKind
}

// scriptPaths lists the paths whose writers choose the programs that the
// scripts directory dir runs: dir (its real path), each directory above
// it, each runnable script in it (its real path, as runner.ResolveScript
// gives it) and each directory inside dir holding one (a link's target:
// who may write that directory may put another file in the script's
// place). Empty when dir cannot be resolved; without the scripts when it
// cannot be read.
func scriptPaths(dir string) []scriptPath {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return nil
	}
	paths := []scriptPath{{real, theScriptsDir}}
	for p := filepath.Dir(real); p != real; p = filepath.Dir(p) {
		paths = append(paths, scriptPath{p, aboveScriptsDir})
		if filepath.Dir(p) == p {
			break
		}
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return paths
	}
	inside := map[string]bool{}
	for _, e := range entries {
		path, err := runner.ResolveScript(real, e.Name())
		if err != nil {
			continue // not runnable
		}
		paths = append(paths, scriptPath{path, aScript})
		for d := filepath.Dir(path); d != real && !inside[d]; d = filepath.Dir(d) {
			inside[d] = true
			paths = append(paths, scriptPath{d, insideScriptsDir})
		}
	}
	return paths
}
