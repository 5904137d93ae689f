package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolveScript: whatever the name, a script that resolves lies inside
// the scripts directory, and a name with a separator or ".." never resolves.
func FuzzResolveScript(f *testing.F) {
	root := f.TempDir()
	dir := filepath.Join(root, "scripts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	outside := filepath.Join(root, "outside.sh")
	for _, p := range []string{filepath.Join(dir, "ok.sh"), outside} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out.sh")); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"ok.sh", "out.sh", "../outside.sh", "/bin/sh", "..", ".", "", "a\\b", "ok.sh\x00", "-x", "C:ok.sh", "ok.sh/"} {
		f.Add(s)
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := ResolveScript(dir, name)
		if err != nil {
			return
		}
		if strings.ContainsAny(name, `/\`) || name == ".." || strings.Contains(name, "\x00") {
			t.Fatalf("ResolveScript accepted %q", name)
		}
		if filepath.Dir(p) != realDir {
			t.Fatalf("ResolveScript(%q) = %q, outside %q", name, p, realDir)
		}
	})
}
