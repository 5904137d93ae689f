package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestWorkListTakesADeletedAccountAsItListsIt: the units of a deleted
// account are listed under "NAME (deleted TIME)", and `work list --account`
// takes that name as the listing shows it, listing those units alone; the
// deleted name itself is refused with a line that gives it, and a deleted
// name that was never one is refused as unknown.
func TestWorkListTakesADeletedAccountAsItListsIt(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, a := range []string{"acme", "globex"} {
		if code, _, stderr := runMain(t, "account", "create", a, "--data-dir", dir); code != 0 {
			t.Fatalf("account create %s: exit %d: %s", a, code, stderr)
		}
	}
	st, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for id, account := range map[string]string{"w_acme": "acme", "w_globex": "globex"} {
		if _, err := st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: account, KeyID: 1,
			SealedCommand: []byte("sealed"), Now: now, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	code, out, stderr := runMain(t, "account", "delete", "acme", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("account delete acme: exit %d: %s", code, stderr)
	}
	m := regexp.MustCompile(`listed as "(acme \(deleted [^"]+\))"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("account delete printed:\n%s\nwant the name its units are listed under", out)
	}
	tombstone := m[1]

	code, out, stderr = runMain(t, "work", "list", "--account", tombstone, "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "w_acme") || !strings.Contains(out, tombstone) || strings.Contains(out, "w_globex") {
		t.Errorf("work list --account %q: exit %d: %s%s\nwant the deleted account's unit alone", tombstone, code, out, stderr)
	}

	code, _, stderr = runMain(t, "work", "list", "--account", "acme", "--data-dir", dir)
	if code != ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, `--account: there is no account "acme"`) || !strings.Contains(stderr, tombstone) {
		t.Errorf("work list --account acme after its deletion: exit %d, stderr %q; want one line giving %q", code, stderr, tombstone)
	}

	never := "acme (deleted 2001-01-01T00:00:00.000000Z)"
	code, _, stderr = runMain(t, "work", "list", "--account", never, "--data-dir", dir)
	if code != ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, never) {
		t.Errorf("work list --account %q: exit %d, stderr %q; want one line saying there is no such account", never, code, stderr)
	}
}
