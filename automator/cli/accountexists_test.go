package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestAnAccountCreatedTwiceSaysHowToGetAProfile: `account create` of an
// account that exists says how to get a profile again (a review: run a
// second time as the quick start writes it, `> proxy.yaml` had emptied
// the only copy, and the message said only that the account exists); a
// --data-dir that is no automator's is said so, not that init should be
// run there (which would make a second automator).
func TestAnAccountCreatedTwiceSaysHowToGetAProfile(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create: exit %d: %s", code, stderr)
	}
	code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir)
	if want := "`automator account rotate-token acme --data-dir " + dir + "` prints one with a new token"; code == 0 || !strings.Contains(stderr, want) {
		t.Errorf("account create of an account that exists: exit %d, stderr %q; want it to say %q", code, stderr, want)
	}
	misspelt := filepath.Join(filepath.Dir(dir), "dat")
	code, _, stderr = runCLI(t, "account", "list", "--data-dir", misspelt)
	if want := misspelt + " is not an automator's data directory"; code == 0 || !strings.Contains(stderr, want) || strings.Contains(stderr, "first") {
		t.Errorf("a --data-dir that is no automator's: exit %d, stderr %q; want it to say %q", code, stderr, want)
	}
}
