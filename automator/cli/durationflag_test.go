package cli

import (
	"strings"
	"testing"
)

// TestADurationFlagWithoutItsUnitSaysHowToWriteIt: `--timeout 5` (seconds
// meant, as a shell's timeout takes them) is refused saying how to write
// a duration, not with the flag package's bare "parse error"; so are
// --since and --overlap. Nothing is submitted: the flags are read first.
func TestADurationFlagWithoutItsUnitSaysHowToWriteIt(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"exec", "--data-dir", t.TempDir(), "--account", "acme", "--timeout", "5", "hello.sh"},
		{"audit", "--data-dir", t.TempDir(), "--since", "2d"},
		{"account", "rotate-token", "acme", "--data-dir", t.TempDir(), "--overlap", "1 hour"},
	} {
		code, out, stderr := runCLI(t, args...)
		if code != ExitError || out != "" || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "parse error") || !strings.Contains(stderr, "such as 30s, 5m or 1h") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and one line saying how to write a duration", args, code, out, stderr, ExitError)
		}
	}
}
