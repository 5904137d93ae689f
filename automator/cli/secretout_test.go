package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestASecretThatCannotBeWrittenFailsTheCommand: account create, rotate-token,
// rotate-key and apikey create print the only copy of a new secret (a
// profile's token, an API key) on stdout. When stdout cannot take it (a
// full disk under `> proxy.yaml`, a reader gone), the command must not exit
// 0 as if the secret were saved: it exits 255 with one line saying that
// the change was made, that its secret was not written, and what to run.
func TestASecretThatCannotBeWrittenFailsTheCommand(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"account", "create", "globex"}, "automator account rotate-token globex"},
		{[]string{"account", "rotate-token", "acme"}, "automator account rotate-token acme"},
		{[]string{"account", "rotate-key", "acme"}, "automator account rotate-key acme"},
		{[]string{"apikey", "create", "ci", "--all-accounts"}, "automator apikey revoke ak_"},
	} {
		// A pipe whose reader is gone: every write to it fails.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		var errb bytes.Buffer
		code := Main(t.Context(), append(c.args, "--data-dir", dir), Env{Stdout: w, Stderr: &errb})
		w.Close()
		stderr := errb.String()
		if code != ExitError || !strings.Contains(stderr, "could not be written") || !strings.Contains(stderr, c.want) {
			t.Errorf("automator %s with a stdout that fails: exit %d, stderr %q; want exit %d and a line saying the secret was not written and to run %q",
				strings.Join(c.args, " "), code, stderr, ExitError, c.want)
		}
	}
	// The changes were made, as the lines say.
	if _, out, _ := runMain(t, "account", "list", "--data-dir", dir); !strings.Contains(out, "globex") {
		t.Errorf("account list:\n%s\nwant globex, created although its profile was not written", out)
	}
}
