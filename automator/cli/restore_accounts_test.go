package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestRestoreSaysWhatToRunForAnAccountRotatedOrMadeAfterTheBackup: an
// account whose token was rotated after the backup was taken, and one made
// after it, are named by the restore with the command that mends each; the
// operator runs that command as printed, and it works (it once lacked
// --data-dir, which every account command requires, and was refused). So
// is an API key made after the backup, valid, which the restored database
// does not know (before, the restore said nothing of it, and its callers
// were refused with nothing pointing at the restore); one revoked before
// the restore is not named.
func TestRestoreSaysWhatToRunForAnAccountRotatedOrMadeAfterTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	file := takeBackup(t, dir)
	for _, args := range [][]string{
		{"account", "rotate-token", "acme", "--data-dir", dir},
		{"account", "create", "later", "--data-dir", dir},
		{"apikey", "create", "late key", "--data-dir", dir, "--accounts", "acme,later"},
		{"apikey", "create", "revoked", "--data-dir", dir, "--all-accounts"},
	} {
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("%v after the backup: exit %d: %s", args, code, stderr)
		}
	}

	_, list, _ := runCLI(t, "apikey", "list", "--data-dir", dir)
	revoked := regexp.MustCompile(`(ak_[0-9a-f]+)\s+revoked`).FindStringSubmatch(list)
	if revoked == nil {
		t.Fatalf("apikey list:\n%s\nwant the key named revoked", list)
	}
	if code, _, stderr := runCLI(t, "apikey", "revoke", revoked[1], "--data-dir", dir); code != 0 {
		t.Fatalf("apikey revoke: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	command := regexp.MustCompile("`(automator [^`]*)`")
	for _, account := range []string{"account acme", "account later", "API key ak_"} {
		var line string
		for _, l := range strings.Split(stdout, "\n") {
			if strings.HasPrefix(l, "warning: "+account) {
				line = l
			}
		}
		if account == "API key ak_" && (!strings.Contains(line, "(late key) was made after the backup") || strings.Count(stdout, "warning: API key") != 1) {
			t.Errorf("restore printed:\n%s\nwant one warning, naming the key made after the backup that is still valid", stdout)
		}
		m := command.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("restore printed:\n%s\nwant a warning naming account %s and the command to run", stdout, account)
			continue
		}
		args := shellWords(t, m[1])[1:]
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Errorf("the command the restore printed for account %s, `%s`, run as printed: exit %d: %s", account, m[1], code, stderr)
		}
	}
}

// shellWords splits a command line as shellArg quotes its words: words
// apart at spaces, runs between single quotes taken as they are, and a
// backslash escaping the next byte.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			in = true
		case c == ' ':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("%q ends inside a quote", line)
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// TestRestoreOfANewerDatabaseAdvisesNoRotation: a restore undone by
// restoring the database it kept aside (newer than the backup it put in
// place) finds the account's token changed, later in what it restores:
// it says the restored database serves the latest profile, and gives no
// advice to rotate it again (which would cut off every proxy given that
// profile, a review found); the restore it undid did advise it. Its first
// line does not take the kept database for a copy `automator backup` made.
func TestRestoreOfANewerDatabaseAdvisesNoRotation(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	file := takeBackup(t, dir)
	if code, _, stderr := runCLI(t, "account", "rotate-token", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("rotate-token: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 || !strings.Contains(stdout, "warning: account acme had its token or key rotated after the backup was taken") || !strings.Contains(stdout, "; the backup began at ") {
		t.Fatalf("restore of the backup: exit %d, %s\n%s\nwant the warning that acme was rotated after it", code, stderr, stdout)
	}
	kept := regexp.MustCompile(`the database it replaced is kept as (\S+)`).FindStringSubmatch(stdout)
	if kept == nil {
		t.Fatalf("restore printed:\n%s\nwant the file the replaced database is kept as", stdout)
	}
	// Moved out of the data directory first: the restore keeps the
	// database it replaces under a name of the second.
	newer := filepath.Join(t.TempDir(), "newer.db")
	if err := os.Rename(kept[1], newer); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, "restore", "--data-dir", dir, newer)
	if code != 0 {
		t.Fatalf("restore of the database kept aside: exit %d: %s", code, stderr)
	}
	if strings.Contains(stdout, "rotate-token") || !strings.Contains(stdout, "account acme's token or key changed later in the backup") ||
		strings.Contains(stdout, "the backup began at") || !strings.Contains(stdout, ", of kind account.token_rotated: not a copy `automator backup` made") {
		t.Errorf("restore of the newer database kept aside printed:\n%s\nwant it saying acme's token is the newer, no advice to rotate it, and its latest event for what it is", stdout)
	}
}

// TestRestoreAdvisesRotationWhenTheReplacedDatabaseHoldsNoRecordOfIt: an
// account whose token differs between the backup and the database it
// replaces, the latter holding no record of the account's credentials
// (purged past audit_retention), gets the warning to rotate: the side
// without a record tells nothing of which is newer (a review: "nothing to
// rotate" of a token rotated after the backup, every proxy on the latest
// profile then refused).
func TestRestoreAdvisesRotationWhenTheReplacedDatabaseHoldsNoRecordOfIt(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		restored, err := st.AccountList(t.Context())
		if err != nil || len(restored) != 1 {
			t.Fatalf("accounts: %v, %v", restored, err)
		}
		prev := previous{exists: true, accounts: []store.Account{{Name: "acme", TokenHash: []byte("a rotated token's hash"), KeyID: restored[0].KeyID}}, changed: map[string]time.Time{}}
		lines, err := accountWarnings(t.Context(), st, prev, map[string]time.Time{"acme": time.Now()}, dir, "")
		if err != nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "warning: account acme had its token or key rotated after the backup was taken") {
			t.Errorf("the warnings: %q, %v; want the one to rotate acme", lines, err)
		}
	})
}

// TestARestoreTellsABackupOfABusyAutomatorForOne: events of calls served
// while a backup began follow its start's record in its copy; the restore
// still tells the copy for one `automator backup` made, by the record
// the backup appends to the copy alone (a review: one of 8 backups of a
// busy automator was said to be "not a copy automator backup made").
func TestARestoreTellsABackupOfABusyAutomatorForOne(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	file := filepath.Join(t.TempDir(), "busy.db")
	withStore(t, dir, func(st *sqlitestore.Store) {
		now := time.Now()
		for _, e := range []store.AuditEvent{
			{At: now, Kind: store.AuditBackup, Detail: sqlitestore.BackupBeganDetail},
			{At: now.Add(time.Millisecond), Kind: store.AuditWorkQueued, Account: "acme", WorkID: "w_1"},
		} {
			if _, err := st.AuditAppend(t.Context(), e); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Backup(t.Context(), file); err != nil {
			t.Fatal(err)
		}
	})
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 || !strings.Contains(stdout, "; the backup began at ") || strings.Contains(stdout, "not a copy") {
		t.Errorf("restore of the busy automator's backup: exit %d, %s\n%s\nwant it told for a backup, with when it began", code, stderr, stdout)
	}
}
