//go:build !windows

package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/nobodytest"
)

// enterChildEnv, set, makes TestAScriptsDirThisUserCannotEnterIsRefused
// validate a config of the scripts_dir it names and print the outcome: the
// test run again as an unprivileged user.
const enterChildEnv = "OPSGATE_TEST_VALIDATE_SCRIPTS_DIR"

// TestAScriptsDirThisUserCannotEnterIsRefused: a scripts_dir that exists
// but that the proxy's user may not enter (root's, mode 0700, and the proxy
// run as another user) is refused at start, naming scripts_dir. It was
// accepted: the proxy polled, claimed units and failed each one ("unknown
// script ...: permission denied"), while @ping said it was fine, taking
// its share of an active/active group's units from the instances that
// could run them. As root the check runs in a copy of this test run as
// nobody.
func TestAScriptsDirThisUserCannotEnterIsRefused(t *testing.T) {
	if dir := os.Getenv(enterChildEnv); dir != "" {
		key, err := crypto.NewKey(1)
		if err != nil {
			t.Fatal(err)
		}
		c := Config{AutomatorURL: "http://127.0.0.1:1", Token: "t", Key: key.String(), ScriptsDir: dir,
			InstanceID: "a", MaxConcurrency: 4, MaxOutputBytes: 1 << 20}
		os.Stdout.WriteString("validate: " + strings.ReplaceAll(errString(c.Validate()), "\n", "; ") + "\n")
		return
	}
	t.Parallel()
	dir := t.TempDir()
	scripts := filepath.Join(dir, "scripts")
	if err := os.Mkdir(scripts, 0o700); err != nil {
		t.Fatal(err)
	}
	var got string
	if os.Geteuid() != 0 {
		if err := os.Chmod(scripts, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(scripts, 0o700) })
		got = errString((Config{ScriptsDir: scripts}).Validate())
	} else {
		got = validateAsNobody(t, dir, scripts)
	}
	if !strings.Contains(got, "scripts_dir: ") || !strings.Contains(got, "may not enter it") {
		t.Fatalf("a scripts_dir the proxy's user may not enter: %q, want it refused naming scripts_dir", got)
	}
	// One it may enter passes.
	if err := os.Chmod(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := errString((Config{ScriptsDir: scripts}).Validate()); strings.Contains(got, "scripts_dir") {
		t.Fatalf("a scripts_dir the user may enter: %q, want scripts_dir accepted", got)
	}
}

// validateAsNobody runs this test again as the user nobody
// (nobodytest.Run), on scripts (root's, mode 0700, in dir), and returns
// what Validate said there.
func validateAsNobody(t *testing.T, dir, scripts string) string {
	t.Helper()
	out := nobodytest.Run(t, dir, "TestAScriptsDirThisUserCannotEnterIsRefused", enterChildEnv+"="+scripts)
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "validate: "); ok {
			return v
		}
	}
	t.Fatalf("the test run as nobody said nothing of Validate:\n%s", out)
	return ""
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
