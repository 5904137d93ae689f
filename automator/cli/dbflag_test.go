package cli

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// auditCounts counts the audit events of each kind in the SQLite database
// at path, opened by this test alone for the moment it reads.
func auditCounts(t *testing.T, path string) map[string]int {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	counts := map[string]int{}
	p := store.AuditListParams{Limit: 1000}
	for {
		events, err := st.AuditList(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			counts[e.Kind]++
		}
		if len(events) < p.Limit {
			return counts
		}
		p.AfterSeq = events[len(events)-1].Seq
	}
}

// TestEveryCommandThatOpensTheStoreTakesDB: each command that opens the
// database takes --db, as serve does, and acts on the database it names,
// not on the one automator.yaml names: run without it against a serve
// given --db, `account create` put the account where that serve does not
// look, and said nothing.
func TestEveryCommandThatOpensTheStoreTakesDB(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	mine := filepath.Join(dir, config.FileDB)
	other := filepath.Join(t.TempDir(), "other.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, other); code != 0 {
		t.Fatalf("backup into other.db: exit %d: %s", code, stderr)
	}
	db := "sqlite:" + other
	file := filepath.Join(t.TempDir(), "backup.db")
	var keyID string
	for _, c := range []struct {
		args []string
		kind string // the audit event it records in other.db alone ("": none)
		n    int    // how many of them (0: one)
		out  string // what its stdout holds ("": anything)
	}{
		{args: []string{"account", "create", "acme"}, kind: store.AuditAccountCreated},
		{args: []string{"apikey", "create", "ci", "--accounts", "acme"}, kind: store.AuditAPIKeyCreated},
		{args: []string{"apikey", "list"}, out: "ci"},
		{args: []string{"apikey", "revoke", "KEY"}, kind: store.AuditAPIKeyRevoked},
		{args: []string{"account", "rotate-token", "acme"}, kind: store.AuditTokenRotated},
		{args: []string{"account", "rotate-key", "acme"}, kind: store.AuditKeyRotated},
		{args: []string{"account", "list"}, out: "acme"},
		{args: []string{"audit"}, out: "acme"},
		{args: []string{"cert", "renew"}, kind: store.AuditCertRenewed},
		{args: []string{"backup", file}, kind: store.AuditBackup, n: 2}, // as it starts and once it has ended
		{args: []string{"account", "delete", "acme"}, kind: store.AuditAccountDeleted},
		// It compares the backup with the database it replaces, which
		// had the deletion.
		{args: []string{"restore", file}, kind: store.AuditRestore, out: `account "acme" was deleted after the backup was taken: deleted again`},
	} {
		args := append([]string(nil), c.args...)
		for i, a := range args {
			if a == "KEY" {
				args[i] = keyID
			}
		}
		name := strings.Join(args, " ")
		before, beforeMine := auditCounts(t, other), auditCounts(t, mine)
		code, stdout, stderr := runCLI(t, append(args, "--data-dir", dir, "--db", db)...)
		if code != 0 {
			t.Fatalf("%s --db: exit %d: %s", name, code, stderr)
		}
		if c.kind != "" {
			if after, n := auditCounts(t, other), max(c.n, 1); after[c.kind] != before[c.kind]+n {
				t.Errorf("%s --db: %d %s events in the database --db names, want %d", name, after[c.kind], c.kind, before[c.kind]+n)
			}
			if after := auditCounts(t, mine); after[c.kind] != beforeMine[c.kind] {
				t.Errorf("%s --db: %d %s events in automator.yaml's database, want %d as before: it acted on the database --db overrides", name, after[c.kind], c.kind, beforeMine[c.kind])
			}
		}
		if c.out != "" && !strings.Contains(stdout, c.out) {
			t.Errorf("%s --db printed %q, want it to hold %q (of the database --db names)", name, stdout, c.out)
		}
		if m := regexp.MustCompile(`API key (ak_[0-9a-f]+)`).FindStringSubmatch(stderr); m != nil {
			keyID = m[1]
		}
	}
}

// TestHintsOfACommandGivenDBSayToGiveItAgain: a command given --db that
// names another command in a refusal says "(with the same --db)", without
// the DSN, which may hold a password; run as printed with that --db, the
// command it names works (it lists the database --db names).
func TestHintsOfACommandGivenDBSayToGiveItAgain(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	other := filepath.Join(t.TempDir(), "other.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, other); code != 0 {
		t.Fatalf("backup into other.db: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{
		{"apikey", "revoke", "ak_nope"},
		{"account", "delete", "nope"},
		{"account", "rotate-token", "nope"},
		{"account", "rotate-key", "nope"},
		{"apikey", "create", "ci", "--accounts", "nope"}, // last: its hint makes the account
	} {
		name := strings.Join(args, " ")
		code, _, stderr := runCLI(t, append(args, "--data-dir", dir, "--db", other)...)
		if code != ExitError || !strings.Contains(stderr, "(with the same --db)") || strings.Contains(stderr, other) {
			t.Errorf("%s --db DSN: exit %d, stderr %q; want %d and a hint saying (with the same --db), without the DSN", name, code, stderr, ExitError)
			continue
		}
		hint := hintCommand(stderr)
		if hint == nil {
			t.Errorf("%s --db DSN: stderr %q names no command", name, stderr)
			continue
		}
		if code, _, herr := runCLI(t, append(hint, "--db", other)...); code != 0 {
			t.Errorf("%s --db DSN printed %q; that command run as printed with the same --db: exit %d: %s", name, stderr, code, herr)
		}
	}
}

// TestTheDashboardNamesServesDBWithoutItsPassword: the --db the dashboard
// prints in its commands is serve's, as one shell word, a SQLite file by
// its absolute path and a PostgreSQL URL without its password or
// sslpassword; none without --db.
func TestTheDashboardNamesServesDBWithoutItsPassword(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct{ db, want string }{
		{"", ""},
		{"sqlite:other.db", shellArg(filepath.Join(dir, "other.db"))},
		{"postgres://automator@db.example/automator", "postgres://automator@db.example/automator"},
		{"postgres://automator:s3cret@db.example/automator?sslmode=verify-full", "'postgres://automator@db.example/automator?sslmode=verify-full'"},
		{"postgresql://db.example/automator?password=s3cret&sslpassword=s3cret&sslmode=require", "'postgresql://db.example/automator?sslmode=require'"},
		{"postgresql://db.example/automator?sslpassword=s3cret&sslmode=require", "'postgresql://db.example/automator?sslmode=require'"},
	} {
		cfg := config.Default("https://127.0.0.1:8443")
		if c.db != "" {
			cfg.DB = c.db
		}
		if got := dashboardDB(dir, cfg, c.db); got != c.want {
			t.Errorf("serve --db %q: the dashboard names --db %q, want %q", c.db, got, c.want)
		}
	}
}
