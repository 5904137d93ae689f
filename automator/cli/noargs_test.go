package cli

import (
	"strings"
	"testing"
)

// TestStrayArgumentsAreNamedWithoutTheFlags: a command that takes no
// arguments, given one before its flags, names that argument only, not
// the flags after it as if they were arguments too; nothing is done.
func TestStrayArgumentsAreNamedWithoutTheFlags(t *testing.T) {
	dir := t.TempDir() // never reached: the argument is refused first
	for _, c := range []struct {
		name string
		rest []string // after "extra"
	}{
		{"init", []string{"--data-dir", dir}},
		{"serve", []string{"--data-dir", dir}},
		{"account list", []string{"--data-dir", dir, "--json"}},
		{"apikey list", []string{"--data-dir", dir}},
		{"audit", []string{"--since", "1h", "--data-dir", dir}},
		{"cert renew", []string{"--data-dir", dir}},
		{"instances", []string{"--account", "acme", "--data-dir", dir}},
		{"work list", []string{"--data-dir", dir, "--limit", "3"}},
		{"replicas", []string{"--data-dir", dir}},
		{"status", []string{"--name", "automator"}},
	} {
		args := append(append(strings.Fields(c.name), "extra"), c.rest...)
		code, out, stderr := runCLI(t, args...)
		want := "automator: " + c.name + ` takes no arguments, got ["extra"]` + "\n"
		if code != ExitError || stderr != want || out != "" {
			t.Errorf("automator %s: exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(args, " "), code, out, stderr, ExitError, want)
		}
	}
}
