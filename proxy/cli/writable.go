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
	// anInterpreter is the program a script's #! line names (its real
	// path); the directories above it are aboveScriptsDir's kind.
	anInterpreter
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
// place), and the interpreter each script's #! line names with the
// directories above it (a review: one any user could replace went
// unsaid). Empty when dir cannot be resolved; without the scripts when it
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
	seen := map[string]bool{} // interpreters and the directories above them
	for _, p := range paths {
		seen[p.path] = true
	}
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
		interp := runner.Interpreter(path)
		if !filepath.IsAbs(interp) {
			continue // none, or not one the system runs
		}
		program, err := filepath.EvalSymlinks(interp)
		if err != nil {
			continue
		}
		if !seen[program] {
			seen[program] = true
			paths = append(paths, scriptPath{program, anInterpreter})
		}
		// The directories above the program, and above the path as the
		// #! line writes it: whoever may write one may put another
		// program, or link, in its place (a virtualenv's python, a link
		// to /usr/bin/python3 in a directory of a user's: a re-review).
		for _, p := range []string{program, interp} {
			for d := filepath.Dir(p); !seen[d]; d = filepath.Dir(d) {
				seen[d] = true
				paths = append(paths, scriptPath{d, aboveScriptsDir})
			}
		}
	}
	return paths
}
