//go:build !windows

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/nobodytest"
)

// accessChildEnv, set, makes TestScriptsTheProxysUserMayNotRunOrReadAreListed
// print what unrunnable lists of the directory it names: the test run
// again as nobody.
const accessChildEnv = "OPSGATE_TEST_UNRUNNABLE_AS_NOBODY"

// TestScriptsTheProxysUserMayNotRunOrReadAreListed: a script the proxy's
// user may not run (root's alone, mode 0700), and one it may run but not
// read (mode 0711: the interpreter of a #! script cannot read it), are
// listed by the running proxy, each under its own warning, with its mode
// and owner and what to do (a review: a proxy installed --user nobody
// counted the first as runnable and said nothing until a unit failed; the
// second "succeeded" with the interpreter's exit status). `proxy status`,
// run by another user from a shell, lists neither. As root the files are
// made, and the lists made by a copy of this test run as nobody.
func TestScriptsTheProxysUserMayNotRunOrReadAreListed(t *testing.T) {
	if dir := os.Getenv(accessChildEnv); dir != "" {
		for _, running := range []bool{true, false} {
			for _, tr := range unrunnable(dir, running) {
				fmt.Printf("running=%v %s: %s\n", running, tr.warning, strings.Join(tr.scripts, "; "))
			}
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make files only root may run, and run the lists as nobody")
	}
	t.Parallel()
	dir := t.TempDir()
	scripts := filepath.Join(dir, "scripts")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	// bin.sh, which no one may read, is taken for a program made
	// execute-only on purpose, and not listed (a re-review).
	for name, mode := range map[string]os.FileMode{"ok.sh": 0o755, "secret.sh": 0o700, "noread.sh": 0o711, "bin.sh": 0o111} {
		p := filepath.Join(scripts, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho hi\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
	}
	out := nobodytest.Run(t, dir, "TestScriptsTheProxysUserMayNotRunOrReadAreListed", accessChildEnv+"="+scripts)
	for _, want := range []string{
		"running=true " + notAllowedWarning + `: secret.sh (it is executable (mode -rwx------, owner root), but not by the proxy's user (nobody): give that user execute access, and read access to a script)`,
		"running=true " + unreadableWarning + ": noread.sh (mode -rwx--x--x, owner root)",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the lists of the running proxy, as nobody:\n%s\nwant the line %q", out, want)
		}
	}
	if strings.Contains(out, "ok.sh") || strings.Contains(out, "bin.sh") || strings.Contains(out, "running=false") {
		t.Errorf("the lists, as nobody:\n%s\nwant neither ok.sh, nor bin.sh, nor anything listed by status (running=false)", out)
	}
}
