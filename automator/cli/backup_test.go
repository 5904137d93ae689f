package cli

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
)

// runCLI runs one command in this process and returns its exit code,
// stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(t.Context(), args, Env{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// takeBackup backs up the data directory's database with `automator
// backup` into a new file and returns its path; the test fails if the
// backup does.
func takeBackup(t *testing.T, dir string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "b.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, file); code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	return file
}

// withStore runs fn on the data directory's SQLite database, opened by
// this test alone.
func withStore(t *testing.T, dir string, fn func(st *sqlitestore.Store)) {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fn(st)
}

// backupFixture fills a data directory's database with an account, an API
// key, and units queued, claimed and succeeded.
func backupFixture(t *testing.T, dir string) {
	t.Helper()
	ctx := t.Context()
	now := time.Now()
	// The account key sealed with the directory's master key, as `account
	// create` does: a restore refuses a database whose keys it opens none of.
	master, err := readMaster(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := master.SealKey("acme", key)
	if err != nil {
		t.Fatal(err)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("token of acme"), KeyID: 1, SealedKey: sealed, Now: now}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: "ak_later_revoked", Hash: []byte("h"), Name: "ci", Now: now}); err != nil {
			t.Fatal(err)
		}
		for i, id := range []string{"w-done", "w-claimed", "w-queued"} {
			queued := now.Add(time.Duration(i) * time.Millisecond) // claimed oldest first
			if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: queued, Deadline: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		ws, err := st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "host-a", Max: 2, ClaimIDs: []string{"c-1", "c-2"}, Now: now.Add(time.Second)})
		if err != nil || len(ws) != 2 {
			t.Fatalf("WorkClaim: %v, %v", ws, err)
		}
		if _, err := st.WorkComplete(ctx, store.WorkCompleteParams{ID: "w-done", ClaimID: "c-1", State: store.StateSucceeded, Now: now.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
	})
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBackupWritesAWholeFileOfItsOwn: the backup is a database file of
// mode 0600 holding the units, with no temporary file left beside it, and
// an existing FILE is refused and left as it was.
func TestBackupWritesAWholeFileOfItsOwn(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	out := t.TempDir()
	file := filepath.Join(out, "automator.backup")
	code, stdout, stderr := runCLI(t, "backup", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "backed up") || !strings.Contains(stdout, config.FileMasterKey) {
		t.Errorf("backup printed %q; want it to say what it wrote and that %s is backed up separately", stdout, config.FileMasterKey)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the backup has mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 1 {
		t.Errorf("the backup's directory holds %d entries, want the backup alone: %v", len(entries), entries)
	}
	st, err := sqlitestore.Open(t.Context(), file)
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]store.State{"w-done": store.StateSucceeded, "w-claimed": store.StateClaimed, "w-queued": store.StateQueued} {
		if w, err := st.WorkGet(t.Context(), id); err != nil || w.State != want {
			t.Errorf("unit %s in the backup: %v, %v; want %s", id, w.State, err, want)
		}
	}
	st.Close()

	before := fileBytes(t, file)
	code, _, stderr = runCLI(t, "backup", "--data-dir", dir, file)
	if code != ExitError || !strings.Contains(stderr, "exists") || !strings.Contains(stderr, "never overwrites") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("backup to an existing file: exit %d, stderr %q; want %d and one line saying it never overwrites", code, stderr, ExitError)
	}
	if !bytes.Equal(fileBytes(t, file), before) {
		t.Errorf("backup to an existing file changed it")
	}
}

// TestBackupAndRestoreSendPostgreSQLToItsOwnTools.
func TestBackupAndRestoreSendPostgreSQLToItsOwnTools(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DB = "postgres://automator:secret@db.invalid:5432/automator"
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "b.db")
	code, _, stderr := runCLI(t, "backup", "--data-dir", dir, file)
	if code != ExitError || !strings.Contains(stderr, "pg_dump") || strings.Contains(stderr, "secret") {
		t.Errorf("backup of PostgreSQL: exit %d, stderr %q; want %d, pg_dump named, no password", code, stderr, ExitError)
	}
	if _, err := os.Stat(file); err == nil {
		t.Errorf("backup of PostgreSQL wrote %s", file)
	}
	code, _, stderr = runCLI(t, "restore", "--data-dir", dir, file)
	if code != ExitError || !strings.Contains(stderr, "--open-work-only") {
		t.Errorf("restore of a file into PostgreSQL: exit %d, stderr %q; want %d and --open-work-only named", code, stderr, ExitError)
	}
}

// TestRestoreEndsTheUnitsOpenInTheBackup: at most once across a restore.
// The units queued and claimed when the backup was taken may have run
// since; the restore ends them timed_out with an audit record each, keeps
// the replaced database aside, and revokes again a key revoked after the
// backup.
func TestRestoreEndsTheUnitsOpenInTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	// After the backup: the claimed unit succeeds, the queued one is
	// claimed, a key is revoked.
	later := time.Now()
	withStore(t, dir, func(st *sqlitestore.Store) {
		ctx := t.Context()
		if _, err := st.WorkComplete(ctx, store.WorkCompleteParams{ID: "w-claimed", ClaimID: "c-2", State: store.StateSucceeded, Now: later}); err != nil {
			t.Fatal(err)
		}
		if ws, err := st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "host-b", Max: 1, ClaimIDs: []string{"c-3"}, Now: later}); err != nil || len(ws) != 1 {
			t.Fatalf("WorkClaim: %v, %v", ws, err)
		}
		if _, err := st.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: "ak_later_revoked", Now: later}); err != nil {
			t.Fatal(err)
		}
	})

	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"ended 2 units open in the backup as timed_out (1 queued, 1 claimed)", "API key ak_later_revoked (ci) was revoked after the backup was taken: revoked again", "kept as "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("restore printed:\n%s\nwant %q", stdout, want)
		}
	}

	cfg, _ := config.Load(dir)
	matches, _ := filepath.Glob(cfg.DBPath(dir) + ".before-restore-*")
	if len(matches) != 1 {
		t.Fatalf("kept aside: %v, want one file", matches)
	}
	aside, err := sqlitestore.Open(t.Context(), matches[0])
	if err != nil {
		t.Fatal(err)
	}
	if w, err := aside.WorkGet(t.Context(), "w-claimed"); err != nil || w.State != store.StateSucceeded {
		t.Errorf("the database kept aside has w-claimed %v, %v; want succeeded, as it was replaced", w.State, err)
	}
	aside.Close()
	if _, err := os.Stat(cfg.DBPath(dir) + ".restoring"); err == nil {
		t.Errorf("the restore left its temporary copy behind")
	}

	withStore(t, dir, func(st *sqlitestore.Store) {
		ctx := t.Context()
		for _, id := range []string{"w-claimed", "w-queued"} {
			w, err := st.WorkGet(ctx, id)
			if err != nil || w.State != store.StateTimedOut || !strings.Contains(w.Reason, "restore") {
				t.Errorf("unit %s after the restore: %s (%q), %v; want timed_out by the restore", id, w.State, w.Reason, err)
			}
		}
		if w, _ := st.WorkGet(ctx, "w-done"); w.State != store.StateSucceeded {
			t.Errorf("unit w-done after the restore: %s, want succeeded as in the backup", w.State)
		}
		if ws, err := st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "host-c", Max: 5, ClaimIDs: claimIDsFor(5), Now: time.Now()}); err != nil || len(ws) != 0 {
			t.Errorf("a claim after the restore got %d units, %v; want none", len(ws), err)
		}
		events, err := st.AuditList(ctx, store.AuditListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		ended := map[string]bool{}
		restores := 0
		for _, e := range events {
			if e.Kind == store.AuditWorkEnded && e.Detail == "restore" && e.Outcome == string(store.StateTimedOut) {
				ended[e.WorkID] = true
			}
			if e.Kind == store.AuditRestore {
				restores++
			}
		}
		if !ended["w-claimed"] || !ended["w-queued"] || len(ended) != 2 || restores != 1 {
			t.Errorf("audit records of the restore: units %v and %d restore events; want w-claimed and w-queued, and one", ended, restores)
		}
		keys, err := st.APIKeyList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if revoked := !k.RevokedAt.IsZero(); revoked != (k.ID == "ak_later_revoked") {
				t.Errorf("API key %s after the restore: revoked %v; want ak_later_revoked alone revoked", k.ID, revoked)
			}
		}
	})
}

func claimIDsFor(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "claim-" + string(rune('a'+i))
	}
	return ids
}

// TestRestoreRefusesWhatIsNotABackup: a file that is not SQLite's, one of
// a newer schema, and a missing one are each refused with one precise
// line, and the database is left as it was.
func TestRestoreRefusesWhatIsNotABackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	cfg, _ := config.Load(dir)
	dbPath := cfg.DBPath(dir)
	tmp := t.TempDir()

	text := filepath.Join(tmp, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(tmp, "newer.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, newer); code != 0 {
		t.Fatalf("backup: %s", stderr)
	}
	st, err := sqlitestore.Open(t.Context(), newer)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	bumpSchema(t, newer)
	before := fileBytes(t, dbPath) // the backup added its audit record

	for _, c := range []struct{ file, want string }{
		{text, text + " is not an SQLite database"},
		{newer, "the database in " + newer + " is at version 999, newer than this binary knows"},
		{filepath.Join(tmp, "missing.db"), "missing.db"},
	} {
		code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, c.file)
		if code != ExitError || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
			t.Errorf("restore %s: exit %d, stdout %q, stderr %q; want %d and one line saying %q", filepath.Base(c.file), code, stdout, stderr, ExitError, c.want)
		}
	}
	if !bytes.Equal(fileBytes(t, dbPath), before) {
		t.Errorf("a refused restore changed the database")
	}
	if matches, _ := filepath.Glob(dbPath + ".*"); len(matches) != 0 {
		t.Errorf("a refused restore left %v", matches)
	}
}

// TestARestoreWhoseAuditEventCannotBeWrittenReplacesNothing: the
// restore's database.restore event goes into the copy before the copy
// takes the database's place; when it cannot be written (the backup's
// audit log refuses every insert), the restore fails with one line saying
// so and the database is left as it was.
func TestARestoreWhoseAuditEventCannotBeWrittenReplacesNothing(t *testing.T) {
	dir := initDir(t)
	file := takeBackup(t, dir)
	execSQLite(t, file, `CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit
BEGIN SELECT RAISE(ABORT, 'the test refuses every audit event'); END`)
	cfg, _ := config.Load(dir)
	dbPath := cfg.DBPath(dir)
	before := fileBytes(t, dbPath)

	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != ExitError || stdout != "" || strings.Count(stderr, "\n") != 1 ||
		!strings.Contains(stderr, "appending "+store.AuditRestore+" to the audit log") || !strings.Contains(stderr, "the test refuses every audit event") ||
		!strings.HasSuffix(stderr, "; nothing was replaced\n") {
		t.Errorf("restore of a backup whose audit log refuses events: exit %d, stdout %q, stderr %q; want %d and one line saying the audit log refused the restore's event",
			code, stdout, stderr, ExitError)
	}
	if !bytes.Equal(fileBytes(t, dbPath), before) {
		t.Errorf("a restore whose audit event failed changed the database")
	}
	if matches, _ := filepath.Glob(dbPath + ".*"); len(matches) != 0 {
		t.Errorf("a restore whose audit event failed left %v", matches)
	}
}

// TestRestoreOpenWorkOnlyEndsTheOpenUnitsInPlace: for a database restored
// by other means, the open units end and nothing is replaced.
func TestRestoreOpenWorkOnlyEndsTheOpenUnitsInPlace(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, "--open-work-only")
	if code != 0 || !strings.Contains(stdout, "ended 2 units open in the backup as timed_out (1 queued, 1 claimed)") {
		t.Fatalf("restore --open-work-only: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	cfg, _ := config.Load(dir)
	if matches, _ := filepath.Glob(cfg.DBPath(dir) + ".before-restore-*"); len(matches) != 0 {
		t.Errorf("restore --open-work-only kept %v aside; it replaces nothing", matches)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		for _, id := range []string{"w-claimed", "w-queued"} {
			if w, err := st.WorkGet(t.Context(), id); err != nil || w.State != store.StateTimedOut {
				t.Errorf("unit %s: %s, %v; want timed_out", id, w.State, err)
			}
		}
	})
	code, _, stderr = runCLI(t, "restore", "--data-dir", dir, "--open-work-only", "extra.db")
	if code != ExitError || !strings.Contains(stderr, "takes no FILE") {
		t.Errorf("restore --open-work-only FILE: exit %d, stderr %q", code, stderr)
	}
}

// bumpSchema records schema version 999 in the database file at path, as
// a newer automator would.
func bumpSchema(t *testing.T, path string) {
	t.Helper()
	execSQLite(t, path, `INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)`)
}

// execSQLite runs statements on the SQLite database file at path, opened
// by the test alone.
func execSQLite(t *testing.T, path string, statements ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range statements {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestRestoreDeletesAgainAnAccountDeletedAfterTheBackup: a deletion is
// never undone by a restore, as a revocation is not: an account deleted
// after the backup was taken is deleted again in the restored database
// (its token and key destroyed again), while one of the same name made
// again before the backup, after an earlier deletion, is left alone.
func TestRestoreDeletesAgainAnAccountDeletedAfterTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, args := range [][]string{
		{"account", "create", "acme", "--data-dir", dir},
		{"account", "create", "again", "--data-dir", dir},
		{"account", "delete", "again", "--data-dir", dir},
		{"account", "create", "again", "--data-dir", dir},
	} {
		if code, _, stderr := runCLI(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	file := takeBackup(t, dir)
	if code, _, stderr := runCLI(t, "account", "delete", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account delete after the backup: exit %d: %s", code, stderr)
	}

	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if want := `account "acme" was deleted after the backup was taken: deleted again`; !strings.Contains(stdout, want) {
		t.Errorf("restore printed:\n%s\nwant %q", stdout, want)
	}
	if strings.Contains(stdout, `account "again"`) {
		t.Errorf("restore printed:\n%s\nwant nothing of account again, deleted and made again before the backup", stdout)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		ctx := t.Context()
		if a, err := st.AccountGet(ctx, "acme"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("account acme after the restore: %+v, %v; want not found (deleted after the backup)", a.Name, err)
		}
		if _, err := st.AccountGet(ctx, "again"); err != nil {
			t.Errorf("account again after the restore: %v; want it kept", err)
		}
		if keys, err := st.AccountKeys(ctx, "acme"); len(keys) != 0 || (err != nil && !errors.Is(err, store.ErrNotFound)) {
			t.Errorf("keys of acme after the restore: %d, %v; want none", len(keys), err)
		}
	})
}

// TestBackupToABadFileRecordsNoBackup: a FILE that is empty, or in a
// directory that does not exist, is refused in one line naming it, and the
// audit log records no backup, since none was taken.
func TestBackupToABadFileRecordsNoBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	missing := filepath.Join(t.TempDir(), "missing")
	backups := t.TempDir()
	for _, c := range []struct{ file, want string }{
		{"", "automator: backup: FILE is empty; name the new file to write the backup to\n"},
		// A directory is told as one, not as a file that exists.
		{backups, "automator: " + backups + " is a directory: name the backup's file in it, such as " + backups + "/automator-"},
		// The directory named, not the temporary file made in it.
		{filepath.Join(missing, "b.db"), "automator: backup: the directory " + missing + " of " + filepath.Join(missing, "b.db") + " does not exist; make it first, private (mode 0700)\n"},
	} {
		code, out, stderr := runCLI(t, "backup", "--data-dir", dir, c.file)
		if code != ExitError || !strings.HasPrefix(stderr, c.want) || strings.Count(stderr, "\n") != 1 || out != "" {
			t.Errorf("backup to %q: exit %d, stdout %q, stderr %q; want %d and one line starting %q", c.file, code, out, stderr, ExitError, c.want)
		}
	}
	if _, audit, _ := runCLI(t, "audit", "--data-dir", dir); strings.Contains(audit, store.AuditBackup) {
		t.Errorf("audit after backups refused:\n%s\nwant no %s event", audit, store.AuditBackup)
	}
}

// TestRestoreOfAnEmptyFileSaysSo: restore "" says FILE is empty, in one
// line, rather than that a file of no name cannot be read, and changes
// nothing.
func TestRestoreOfAnEmptyFileSaysSo(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	code, out, stderr := runCLI(t, "restore", "--data-dir", dir, "")
	if want := "automator: restore: FILE is empty; name the backup to restore\n"; code != ExitError || stderr != want || out != "" {
		t.Errorf("restore \"\": exit %d, stdout %q, stderr %q; want %d and %q", code, out, stderr, ExitError, want)
	}
}

// TestRestoreOverADatabaseWithNoSchemaSaysThereIsNothingToCompareWith: a
// data directory whose automator.db is there but empty (no table) has no
// credentials to compare the backup with, as one with no database: the
// restore says so, and what to check, rather than reading a migrated copy
// of it as an automator's with no API key, account or deletion, and saying
// nothing of those withdrawn after the backup.
func TestRestoreOverADatabaseWithNoSchemaSaysThereIsNothingToCompareWith(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(cfg.DBPath(dir), 0); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"the database it replaced is kept as ", "warning: there was no database to compare the backup with", "automator apikey list --data-dir " + dir} {
		if !strings.Contains(stdout, want) {
			t.Errorf("restore over an empty database printed:\n%s\nwant %q", stdout, want)
		}
	}
}
