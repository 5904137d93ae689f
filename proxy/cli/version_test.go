package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/version"
)

// TestVersionSaysTheBuild: `proxy version` (and --version) prints the
// build's version, so that a binary can be checked before it is installed
// over a service's; an argument after it is refused.
func TestVersionSaysTheBuild(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}, {"version", "x"}} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), args, Env{Stdout: &stdout, Stderr: &stderr})
		if len(args) > 1 {
			if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "version takes no arguments") {
				t.Errorf("proxy %v: exit %d, stdout %q, stderr %q; want it refused", args, code, stdout.String(), stderr.String())
			}
			continue
		}
		out := stdout.String()
		if want := "proxy " + version.Version; code != 0 || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 || stderr.Len() != 0 {
			t.Errorf("proxy %v: exit %d, stdout %q, stderr %q; want one line beginning %q", args, code, out, stderr.String(), want)
		}
	}
}
