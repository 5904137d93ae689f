//go:build linux

package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestExecOfAnUnknownAccountNamesTheListingWhereItRuns: exec --data-dir
// of an account that does not exist names `automator account list` with
// its --data-dir, which works as printed; exec --server, away from the
// automator's host, where no command lists the accounts, names none.
func TestExecOfAnUnknownAccountNamesTheListingWhereItRuns(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	code, _, stderr := runCLI(t, "exec", "--data-dir", s.dir, "--account", "nope", "x.sh")
	hint := hintCommand(stderr)
	if code == 0 || !strings.Contains(stderr, `account "nope" not found`) || hint == nil {
		t.Fatalf("exec --data-dir of an unknown account: exit %d, stderr %q; want it refused, naming the command that lists the accounts", code, stderr)
	}
	if code, _, herr := runCLI(t, hint...); code != 0 || hint[0] != "account" {
		t.Errorf("exec printed %q; that command run as printed: exit %d: %s", stderr, code, herr)
	}

	code, _, stderr = runCLI(t, "exec", "--server", "https://"+s.grpc, "--api-key-file", filepath.Join(s.dir, config.FileAPIKey),
		"--ca", filepath.Join(s.dir, config.FileCACert), "--account", "nope", "x.sh")
	if code == 0 || !strings.Contains(stderr, `account "nope" not found`) || strings.Contains(stderr, "`automator") {
		t.Errorf("exec --server of an unknown account: exit %d, stderr %q; want it refused, naming no command (none lists the accounts from afar)", code, stderr)
	}
}
