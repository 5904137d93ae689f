//go:build linux

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestARevokedAdminKeySaysHowToMakeANewOne: `apikey revoke admin` says
// that admin.apikey held the key it revoked, and how to replace it. From
// then on the commands that use the data directory's admin.apikey (exec, work
// wait, work cancel with --data-dir) are refused. Each says, in one line,
// that the key was revoked, that it is the one in admin.apikey, and the
// command that puts a new one there; that command, run as printed, makes
// them work again and leaves the file private.
func TestARevokedAdminKeySaysHowToMakeANewOne(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	keyFile := filepath.Join(s.dir, config.FileAPIKey)
	fix := regexp.MustCompile("`automator (apikey create admin --all-accounts --data-dir (\\S+)) > (\\S+)`")
	code, out, stderr := runMain(t, "apikey", "revoke", "admin", "--data-dir", s.dir)
	if m := fix.FindStringSubmatch(stderr); code != 0 || m == nil || m[3] != keyFile {
		t.Fatalf("apikey revoke admin: exit %d, stdout %q, stderr %q; want 0 and a line saying admin.apikey held it and how to put a new one there", code, out, stderr)
	}
	var m []string
	for _, args := range [][]string{
		{"exec", "--data-dir", s.dir, "--account", "acme", "x.sh"},
		{"work", "wait", unknownID, "--data-dir", s.dir},
		{"work", "cancel", unknownID, "--data-dir", s.dir},
	} {
		code, _, stderr := runMain(t, args...)
		m = fix.FindStringSubmatch(stderr)
		if code != ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "revoked") || !strings.Contains(stderr, keyFile) ||
			m == nil || m[2] != s.dir || m[3] != keyFile {
			t.Fatalf("automator %s with admin.apikey revoked: exit %d, stderr %q; want %d and one line saying it was revoked and how to put a new key in %s",
				strings.Join(args, " "), code, stderr, ExitError, keyFile)
		}
	}

	// The command as printed: its stdout written over the file, as a
	// shell's > does.
	f, err := os.OpenFile(m[3], os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	code = Main(t.Context(), strings.Fields(m[1]), Env{Stdout: f, Stderr: &errb})
	f.Close()
	if code != 0 {
		t.Fatalf("automator %s: exit %d: %s", m[1], code, errb.String())
	}
	if r := s.cancelCLI(t, unknownID); r.code != ExitSomeIDRefused || !strings.Contains(r.stderr, "no such unit") {
		t.Errorf("work cancel of an unknown id with the new admin.apikey: exit %d, stderr %q; want %d, the id refused as unknown (the key accepted)", r.code, r.stderr, ExitSomeIDRefused)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.apikey after the new key was written over it: %v, %v; want mode 0600", fi.Mode(), err)
	}
}
