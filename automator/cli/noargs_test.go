package cli

import (
	"strings"
	"testing"
)

// TestStrayArgumentsAreNamedWithoutTheFlags: a command that takes no
// arguments, given one before its flags, names that argument only, not
// the flags after it as if they were arguments too; nothing is done.
func TestStrayArgumentsAreNamedWithoutTheFlags(t *testing.T) {
	t.Parallel()
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

// TestExtraArgumentsAreNamed: a command that takes one argument, given
// two (the same one twice included), names what it got in one line, with
// its usage, rather than the usage alone; nothing is done.
func TestExtraArgumentsAreNamed(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, c := range []struct {
		name, what string
		args       []string
	}{
		{"account create", "NAME", []string{"acme", "acme"}},
		{"account delete", "NAME", []string{"acme", "globex"}},
		{"account rotate-token", "NAME", []string{"acme", "acme"}},
		{"account rotate-key", "NAME", []string{"acme", "acme"}},
		{"apikey create", "NAME", []string{"ci", "ops", "--all-accounts"}},
		{"apikey revoke", "ID", []string{"ak_1", "ak_2"}},
		{"work show", "ID", []string{unknownWorkID, unknownWorkID}},
		{"backup", "FILE", []string{"a.db", "b.db"}},
		{"restore", "FILE", []string{"a.db", "b.db"}},
	} {
		args := append(append(strings.Fields(c.name), c.args...), "--data-dir", dir)
		code, out, stderr := runCLI(t, args...)
		want := "automator: " + c.name + " takes one " + c.what + `, got ["` + c.args[0] + `" "` + c.args[1] + `"]; usage: automator ` + c.name + " "
		if code != ExitError || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 || out != "" {
			t.Errorf("automator %s: exit %d, stdout %q, stderr %q; want %d and one line starting %q", strings.Join(args, " "), code, out, stderr, ExitError, want)
		}
	}
}

// unknownWorkID has the shape of a work id, and no automator made it.
const unknownWorkID = "w_0123456789abcdef0123456789abcdef"
