//go:build !windows

package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/nobodytest"
)

// permissionChildEnv, set, makes TestAScriptThisUserMayNotReachOrRunSaysWhy
// resolve the scripts of the directory it names and print what it found:
// the test run again as an unprivileged user.
const permissionChildEnv = "OPSGATE_TEST_RESOLVE_AS_NOBODY"

// TestAScriptThisUserMayNotReachOrRunSaysWhy: a script that is there but
// that the proxy's user may not reach (a scripts directory it may not
// enter) or run (root's alone, mode 0700) is refused as not allowed to
// that user, naming it and what to give it; it was "unknown script", with
// "chmod +x it" for a script that was executable already. A script with
// no execute bit is still unknown, and told to chmod +x. As root the
// lookups run in a copy of this test run as nobody.
func TestAScriptThisUserMayNotReachOrRunSaysWhy(t *testing.T) {
	if dir := os.Getenv(permissionChildEnv); dir != "" {
		for _, c := range []struct{ dir, name string }{{"closed", "a.sh"}, {"open", "root-only.sh"}, {"open", "plain.sh"}} {
			_, err := ResolveScript(filepath.Join(dir, c.dir), c.name)
			fmt.Printf("resolve %s: allowed=%v unknown=%v %v\n", c.name, !errors.Is(err, ErrNotAllowed), errors.Is(err, ErrUnknownScript), err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make root's files and run the lookups as nobody")
	}
	t.Parallel()
	dir := t.TempDir()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"closed/a.sh", 0o755}, {"open/root-only.sh", 0o700}, {"open/plain.sh", 0o644}} {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho ok\n"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "closed"), 0o700); err != nil {
		t.Fatal(err)
	}
	out := nobodytest.Run(t, dir, "TestAScriptThisUserMayNotReachOrRunSaysWhy", permissionChildEnv+"="+dir)
	for _, want := range []string{
		`resolve a.sh: allowed=false unknown=false script the proxy's user may not run "a.sh": the proxy's user (nobody) may not look it up in the scripts directory "` + filepath.Join(dir, "closed") + `" (or where its link leads): give it read and search (x) access: `,
		`resolve root-only.sh: allowed=false unknown=false script the proxy's user may not run "root-only.sh": it is executable (mode -rwx------, owner root), but not by the proxy's user (nobody): give that user execute access, and read access to a script: `,
		`resolve plain.sh: allowed=true unknown=true unknown script "plain.sh": not executable (chmod +x it): `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the lookups as nobody said:\n%s\nwant a line with %q", out, want)
		}
	}
}
