package cli

import (
	"strings"
	"testing"

	"github.com/opsgate/opsgate/version"
)

// TestVersionSaysTheBuild: `automator version` (and --version) prints the
// build's version, so that a binary can be checked before it is installed
// over another; an argument after it is refused.
func TestVersionSaysTheBuild(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"version", "--version"} {
		code, out, stderr := runMain(t, cmd)
		if want := "automator " + version.Version; code != 0 || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 || stderr != "" {
			t.Errorf("automator %s: exit %d, stdout %q, stderr %q; want one line beginning %q", cmd, code, out, stderr, want)
		}
	}
	if code, out, stderr := runMain(t, "version", "x"); code != ExitError || out != "" || !strings.Contains(stderr, "version takes no arguments") {
		t.Errorf("automator version x: exit %d, stdout %q, stderr %q; want it refused", code, out, stderr)
	}
}
