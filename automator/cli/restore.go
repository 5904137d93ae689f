package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/clihelp"
)

// idempotencyWindow is how long an idempotency key stays bound to its
// unit (the server's retention, 24 hours).
const idempotencyWindow = 24 * time.Hour

// restoreReason is the reason of every unit a restore ends.
const restoreReason = "ended by a restore: it was open when the backup was taken and may have run after it, so it is not run again"

// carriedReason ends the open units a restore copied from the database it
// replaced, queued after the backup was taken with an idempotency key: not
// open when the backup was taken, as restoreReason said of them too (a
// review).
const carriedReason = "ended by a restore: it was queued after the backup was taken (copied from the replaced database for its idempotency key) and may have run, so it is not run again"

// cmdRestore puts a backup made by `automator backup` in place of the
// data directory's SQLite database, or, with --open-work-only, ends the
// open units of a database restored by other means (PostgreSQL's tools):
//
//	automator restore --data-dir DIR [--db DSN] FILE
//	automator restore --data-dir DIR [--db DSN] --open-work-only
//
// Either way every unit queued or claimed in the restored database ends
// timed_out: it may have been claimed and run after the backup was taken,
// and handing it out again could run it twice (at most once, DESIGN.md).
func cmdRestore(ctx context.Context, args []string, env Env) error {
	fs := newFlags("restore", env)
	dir := fs.String("data-dir", "", "the automator's data directory (its serve must be stopped)")
	db := dbFlag(fs)
	openOnly := fs.Bool("open-work-only", false, "replace nothing: end the open units of the database as restored by other means (PostgreSQL), before any replica starts")
	pos, err := clihelp.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*dir, *db)
	if err != nil {
		return err
	}
	if *openOnly {
		if len(pos) != 0 {
			return fmt.Errorf("restore --open-work-only takes no FILE, got %q", pos)
		}
		return restoreOpenWork(ctx, *dir, *db, cfg, env)
	}
	file, err := oneArg(fs, "FILE", pos, "usage: automator restore --data-dir DIR [--db DSN] FILE")
	if err != nil {
		return err
	}
	if file == "" {
		return errors.New("restore: FILE is empty; name the backup to restore")
	}
	if pgstore.IsDSN(cfg.DB) {
		return fmt.Errorf("the database is PostgreSQL (%s): restore it with PostgreSQL's own tools, then run `automator restore --data-dir %s --open-work-only`%s before any replica starts; see docs/several-automators.md", pgstore.Redact(cfg.DB), *dir, withSameDB(*db))
	}
	return restoreSQLite(ctx, *dir, *db, cfg, file, env)
}

// restoreSQLite restores the backup FILE into the SQLite database of cfg,
// that of the data directory dir or the one db (--db) names.
func restoreSQLite(ctx context.Context, dir, db string, cfg config.Config, file string, env Env) error {
	lock, err := lockForRestore(dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	dbLock, err := lockSQLiteAlone(dir, cfg, "restore")
	if err != nil {
		return err
	}
	defer dbLock.Release()
	if fi, err := os.Stat(file); err != nil {
		return fmt.Errorf("reading the backup: %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", file)
	}
	if fi, err := os.Stat(file + "-wal"); err == nil && fi.Size() > 0 {
		return fmt.Errorf("%s has a write-ahead log beside it (%s-wal): it is a live database or a copy of one, not a backup; take one with `automator backup`", file, file)
	}
	if err := sqlitestore.CheckHeader(file); err != nil {
		return err
	}

	// The backup is copied beside the database, checked, migrated and its
	// open units ended there; only then does it take the database's place.
	// Until that rename nothing of the data directory has changed.
	dbPath := cfg.DBPath(dir)
	// A database file that is a link (to another volume, say) is restored
	// where the link leads, and the link stays: replaced in the data
	// directory, the database would leave that volume for this one.
	if fi, err := os.Lstat(dbPath); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(dbPath)
		if err != nil {
			return fmt.Errorf("the database %s is a symbolic link that does not lead to a file: %w", dbPath, err)
		}
		dbPath = real
	}
	tmp := dbPath + ".restoring"
	removeSQLiteFiles(tmp) // left by a restore that was interrupted
	done := false
	defer func() {
		if !done {
			removeSQLiteFiles(tmp)
		}
	}()
	if err := copyFile(file, tmp); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			size := "its size"
			if fi, serr := os.Stat(file); serr == nil {
				size = fmt.Sprintf("%d bytes", fi.Size())
			}
			return fmt.Errorf("no room beside the database in %s for the copy of %s the restore makes first (it needs %s; the replaced database is then kept beside it too): nothing was replaced; free space there: %w", filepath.Dir(dbPath), file, size, err)
		}
		return err
	}
	// Owned like the database it replaces (or its directory): run as root
	// on a service's data directory, the restore leaves a database the
	// service's user can open.
	owner := dbPath
	if _, err := os.Stat(dbPath); err != nil {
		owner = filepath.Dir(dbPath)
	}
	if err := keepOwner(tmp, owner); err != nil {
		return fmt.Errorf("giving %s the owner of %s: %w", tmp, owner, err)
	}
	snap, err := sqlitestore.Inspect(ctx, tmp, file)
	if err != nil {
		return err
	}
	now := time.Now()
	st, err := sqlitestore.Open(ctx, tmp)
	if err != nil {
		return fmt.Errorf("opening the copy of %s: %w", file, err)
	}
	// A backup of another automator's database, whose account keys this
	// directory's master key does not open, would leave a database serve
	// refuses: refused here, before anything is replaced.
	unopened, err := checkBackupMasterKey(ctx, st, dir, file)
	var lineage backupLineage
	if err == nil {
		lineage, err = readLineage(ctx, st, file)
	}
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// When the file was taken: its backup's start, or, for a file backup
	// did not make, its latest event.
	taken := snap.LastEvent
	if !snap.Copied.IsZero() {
		taken = cmp.Or(snap.BackupBegan, snap.Copied)
	}
	prev, prevErr, err := readPrevious(ctx, dbPath, now, taken)
	if err != nil {
		return err
	}
	if err := lineage.check(prev, prevErr, dir, dbPath, file); err != nil {
		return err
	}
	st, err = sqlitestore.Open(ctx, tmp)
	if err != nil {
		return fmt.Errorf("opening the copy of %s: %w", file, err)
	}
	queued, claimed, err := endOpenWork(ctx, st, now, restoreReason)
	// The units queued with an idempotency key after the backup was taken
	// are copied from the replaced database, with their audit records: a
	// caller's retry with such a key must not run the command again (at
	// most once). Those still open are then ended as the backup's were,
	// each with its work.ended record. It copies all of them or none (one
	// transaction): a full disk fails the restore, another failure (a
	// damaged database) is said.
	var carried, carriedOpen int
	var carryErr error
	if err == nil && prev.exists && prevErr == nil {
		if err := st.Close(); err != nil {
			return err
		}
		carried, carryErr = sqlitestore.CarryIdempotentUnits(ctx, tmp, dbPath, now.Add(-idempotencyWindow))
		if store.IsStorageFull(carryErr) {
			return fmt.Errorf("copying the units queued with an idempotency key after the backup was taken (nothing was replaced): %w", carryErr)
		}
		if st, err = sqlitestore.Open(ctx, tmp); err != nil {
			return fmt.Errorf("opening the copy of %s: %w", file, err)
		}
		var q, c int
		q, c, err = endOpenWork(ctx, st, now, carriedReason)
		carriedOpen = q + c
	}
	var reRevoked []store.APIKey
	var reDeleted []store.AccountDeletion
	var accountLines []string
	var signOuts int
	if err == nil && prevErr == nil {
		reRevoked, err = carryRevocations(ctx, st, prev.apiKeys)
	}
	if err == nil && prevErr == nil {
		reDeleted, err = carryDeletions(ctx, st, prev.deletions, now)
	}
	if err == nil && prevErr == nil {
		signOuts, err = carrySignOuts(ctx, st, prev.signOuts)
	}
	if err == nil && prevErr == nil {
		var changed map[string]time.Time
		if changed, err = st.CredentialsChanged(ctx); err == nil {
			accountLines, err = accountWarnings(ctx, st, prev, changed, dir, db)
		}
	}
	if err == nil && prevErr == nil {
		var keyLines []string
		keyLines, err = apiKeyWarnings(ctx, st, prev.apiKeys, dir, db)
		accountLines = append(accountLines, keyLines...)
	}
	if err == nil {
		// Putting the copy in place is no transaction of the database:
		// the restore's event goes into the copy before the copy takes
		// the database's place, so the database in place holds it, and a
		// restore whose event cannot be written replaces nothing.
		if _, aerr := st.AuditAppend(ctx, *cliEvent(store.AuditEvent{At: now, Kind: store.AuditRestore,
			Detail: fmt.Sprintf("database restored from a backup; %d open units ended, %d units queued with an idempotency key after the backup (%d of them open, ended), %d API key revocations, %d account deletions and %d dashboard sign-outs carried over", queued+claimed, carried, carriedOpen, len(reRevoked), len(reDeleted), signOuts)})); aerr != nil {
			err = fmt.Errorf("%w; nothing was replaced", aerr)
		}
	}
	if cerr := st.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	aside, moved, err := putInPlace(dbPath, tmp, now, "restore", "before-restore", "the copy of the backup")
	done = moved
	if err != nil {
		return err
	}

	as := ""
	switch {
	case snap.LastEvent.IsZero():
	case !snap.Copied.IsZero():
		as = fmt.Sprintf("; the backup began at %s", cmp.Or(snap.BackupBegan, snap.Copied).UTC().Format(time.RFC3339))
	case snap.LastEventKind == store.AuditBackup:
		// A copy of an earlier release's backup, which marked none.
		as = fmt.Sprintf("; its latest audit event is from %s, when the backup began", snap.LastEvent.UTC().Format(time.RFC3339))
	default:
		// A copy `automator backup` did not make: a database a restore
		// kept aside, a file system's snapshot.
		as = fmt.Sprintf("; its latest audit event is from %s, of kind %s: not a copy `automator backup` made", snap.LastEvent.UTC().Format(time.RFC3339), snap.LastEventKind)
	}
	version := fmt.Sprintf("schema version %d", snap.Version)
	if latest := sqlitestore.LatestVersion(); snap.Version < latest {
		version += fmt.Sprintf(", migrated to %d", latest)
	}
	fmt.Fprintf(env.Stdout, "restored %s into %s (%s%s)\n", file, dbPath, version, as)
	if aside != "" {
		fmt.Fprintf(env.Stdout, "the database it replaced is kept as %s\n", aside)
	}
	printEnded(env, queued, claimed)
	if n := prev.lostQueued + prev.lostClaimed; n > 0 {
		// Said, not only documented: a claimed one's script may be
		// running now, and its caller, told "not found", may run its
		// command again (a review).
		fmt.Fprintf(env.Stdout, "warning: lost with the replaced database, not in the backup: %s queued after the backup was taken without an idempotency key, open (%d queued, %d claimed: a claimed one's script may still be running); waiting for one by id answers \"not found\", and a caller that runs its command again may run it twice\n", unitCount(n), prev.lostQueued, prev.lostClaimed)
	}
	if carryErr != nil {
		fmt.Fprintf(env.Stdout, "warning: the units queued with an idempotency key after the backup was taken could not be copied from the replaced database (%v): a retry with such a key queues its command again\n", carryErr)
	}
	if carried > 0 {
		fmt.Fprintf(env.Stdout, "copied %s queued with an idempotency key after the backup was taken from the replaced database (%d of them open, ended as timed_out): a retry with such a key gets its unit, and runs nothing again\n", unitCount(carried), carriedOpen)
	}
	printCredentials(env, dir, db, prev, prevErr, reRevoked, reDeleted, signOuts, accountLines)
	if len(unopened) > 0 {
		fmt.Fprintf(env.Stdout, "warning: the master key in %s does not open the keys of these accounts of the backup, whose calls will fail: %s\n",
			filepath.Join(dir, config.FileMasterKey), strings.Join(firstNames(unopened, 20), ", "))
	}
	return nil
}

// checkBackupMasterKey refuses the restored copy st of the backup file
// when the data directory's master key opens none of its account keys (as
// serve would refuse it), and returns the accounts whose keys it does not
// open.
func checkBackupMasterKey(ctx context.Context, st store.Store, dir, file string) ([]string, error) {
	master, err := readMaster(dir)
	if err != nil {
		return nil, err
	}
	accounts, err := st.AccountList(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the accounts of %s: %w", file, err)
	}
	var unopened []string
	for _, a := range accounts {
		if _, err := master.OpenKey(a.Name, a.SealedKey); err != nil {
			unopened = append(unopened, a.Name)
		}
	}
	if len(accounts) > 0 && len(unopened) == len(accounts) {
		return unopened, fmt.Errorf("the master key in %s opens none of the %d account keys in %s (%s): the backup is of a database made with another master key, and serve would refuse it; restore it with that %s in the data directory; nothing was replaced",
			filepath.Join(dir, config.FileMasterKey), len(accounts), file, strings.Join(firstNames(unopened, 5), ", "), config.FileMasterKey)
	}
	return unopened, nil
}

// backupLineage is what tells whether a backup is of this automator's
// database when it holds no account (checkBackupMasterKey tells it by the
// accounts' keys otherwise): its API keys, whose hashes (of random
// secrets) it shares with the database it replaces when both descend from
// one `automator init`.
type backupLineage struct {
	accounts int
	apiKeys  []store.APIKey
}

// readLineage reads the backupLineage of st, the copy of the backup file.
func readLineage(ctx context.Context, st store.Store, file string) (backupLineage, error) {
	accounts, err := st.AccountList(ctx)
	if err != nil {
		return backupLineage{}, fmt.Errorf("reading the accounts of %s: %w", file, err)
	}
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return backupLineage{}, fmt.Errorf("reading the API keys of %s: %w", file, err)
	}
	return backupLineage{accounts: len(accounts), apiKeys: keys}, nil
}

// check refuses a backup of no account that shares no API key with the
// database prev it would replace, nor holds the data directory's
// admin.apikey: another automator's (a review: a fresh one's was
// restored, its admin key with it, every exec then refused, and the
// restore said this automator's accounts were made after it). Without a
// database to compare with nothing is refused: moving the database aside
// is how to restore such a backup all the same.
func (l backupLineage) check(prev previous, prevErr error, dir, dbPath, file string) error {
	if l.accounts > 0 || prevErr != nil || !prev.exists || len(prev.apiKeys) == 0 {
		return nil
	}
	// By hash: every init names its admin key "admin".
	hashes := map[string]bool{}
	for _, k := range prev.apiKeys {
		hashes[string(k.Hash)] = true
	}
	for _, k := range l.apiKeys {
		if hashes[string(k.Hash)] || holdsKey(filepath.Join(dir, config.FileAPIKey), k) {
			return nil
		}
	}
	return fmt.Errorf("%s holds no account, no API key of %s, nor the key in %s: it is not a backup of this automator's database but of another's (each `automator init` makes its own); nothing was replaced. If it is this automator's all the same, move %s aside and restore again",
		file, dbPath, filepath.Join(dir, config.FileAPIKey), dbPath)
}

// endOpenWork ends every open unit of st as timed_out, a batch per write,
// each with an audit record, and returns how many were queued and claimed.
func endOpenWork(ctx context.Context, st store.Store, now time.Time, reason string) (queued, claimed int, err error) {
	const batch = 1000
	tmpl := cliEvent(store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Detail: "restore"})
	for {
		ws, err := st.WorkEndOpen(ctx, store.WorkEndOpenParams{Reason: reason, Now: now, Max: batch, Audit: tmpl})
		for _, w := range ws {
			if w.ClaimID != "" {
				claimed++
			} else {
				queued++
			}
		}
		if err != nil {
			return queued, claimed, err
		}
		if len(ws) < batch {
			return queued, claimed, nil
		}
	}
}

// unitCount is "1 unit" or "N units".
func unitCount(n int) string {
	if n == 1 {
		return "1 unit"
	}
	return fmt.Sprintf("%d units", n)
}

func printEnded(env Env, queued, claimed int) {
	if queued+claimed == 0 {
		fmt.Fprintln(env.Stdout, "no unit was open in the backup: none had to be ended")
		return
	}
	fmt.Fprintf(env.Stdout, "ended %s open in the backup as timed_out (%d queued, %d claimed): each may have run after the backup was taken, so none runs again; their callers get a timeout\n",
		unitCount(queued+claimed), queued, claimed)
}

// previous is what the database a restore replaces says of credentials.
type previous struct {
	exists    bool
	apiKeys   []store.APIKey
	accounts  []store.Account
	deletions []store.AccountDeletion
	signOuts  []store.DashboardSessionEndParams // of sessions not expired yet
	// changed is when each account's token or key last changed, by its
	// audit log (sqlitestore.Store.CredentialsChanged).
	changed map[string]time.Time
	// lostQueued and lostClaimed count its units open and queued after
	// the file restored was taken, without an idempotency key: lost with
	// it (openKeylessSince).
	lostQueued, lostClaimed int
}

// readPrevious reads the credentials of the database about to be replaced,
// and the sign-outs of dashboard sessions that have not expired by now, and
// closes it (which checkpoints its write-ahead log into it). A missing
// database is no error: there is nothing to compare with, as with one that
// holds no automator's schema; one that cannot be read is prevErr. A
// database of an older schema is not migrated (a restore that fails leaves
// it as it was, for the binary that made it): a copy of it beside it is,
// and read; err, when that copy cannot be made or the disk is too full to
// migrate it.
func readPrevious(ctx context.Context, dbPath string, now, taken time.Time) (prev previous, prevErr, err error) {
	if _, err := os.Stat(dbPath); errors.Is(err, os.ErrNotExist) {
		return previous{}, nil, nil
	}
	prev = previous{exists: true}
	// Another program's database is not replaced: every other command
	// refuses it, and --db names it by mistake. Checked first, read only:
	// reading the schema version opens the file as the store does, which
	// puts it in WAL mode.
	if err := sqliteOfAnotherProgram(ctx, dbPath); err != nil {
		return prev, nil, fmt.Errorf("%w (nothing was replaced)", err)
	}
	version, latest, err := sqlitestore.SchemaVersion(ctx, dbPath)
	if err != nil {
		return prev, err, nil
	}
	if version == 0 {
		// No automator's schema (an empty file): nothing to compare
		// with, as with no database. Read, a migrated copy would list no
		// credential at all, and the restore would say nothing of those
		// withdrawn after the backup.
		return previous{}, nil, nil
	}
	path := dbPath
	if version < latest {
		path = dbPath + ".previous"
		removeSQLiteFiles(path) // left by a restore that was interrupted
		defer removeSQLiteFiles(path)
		// Closed, the database has no write-ahead log, unless closing it
		// failed to checkpoint: the log is copied with it then.
		for _, suffix := range []string{"", "-wal"} {
			if _, err := os.Stat(dbPath + suffix); suffix != "" && err != nil {
				continue
			}
			if err := copyFile(dbPath+suffix, path+suffix); err != nil {
				return prev, nil, fmt.Errorf("copying the database to be replaced, of an older schema, to read it (nothing was replaced): %w", err)
			}
		}
	}
	st, err := sqlitestore.Open(ctx, path)
	if err != nil {
		// A copy that a full disk keeps from being migrated fails the
		// restore; one that does not migrate (a damaged database, which
		// the restore may be meant to replace) is not read, as before.
		if path != dbPath && store.IsStorageFull(err) {
			return prev, nil, fmt.Errorf("reading a copy of the database to be replaced, of an older schema (nothing was replaced): %w", err)
		}
		return prev, err, nil
	}
	defer st.Close()
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return prev, err, nil
	}
	accounts, err := st.AccountList(ctx)
	if err != nil {
		return prev, err, nil
	}
	deletions, err := st.AccountDeletions(ctx, time.Time{})
	if err != nil {
		return prev, err, nil
	}
	signOuts, err := st.DashboardSessionEndList(ctx, now)
	if err != nil {
		return prev, err, nil
	}
	changed, err := st.CredentialsChanged(ctx)
	if err != nil {
		return prev, err, nil
	}
	lostQueued, lostClaimed, err := openKeylessSince(ctx, st, taken)
	if err != nil {
		return prev, err, nil
	}
	return previous{exists: true, apiKeys: keys, accounts: accounts, deletions: deletions, signOuts: signOuts, changed: changed,
		lostQueued: lostQueued, lostClaimed: lostClaimed}, st.Close(), nil
}

// openKeylessSince counts the units of st open (queued, claimed) that were
// queued after taken without an idempotency key: those of the database a
// restore replaces are in no backup taken at taken, nor copied (a key
// makes a unit copied), and are lost with it. Zero taken: none counted.
func openKeylessSince(ctx context.Context, st store.Store, taken time.Time) (queued, claimed int, err error) {
	if taken.IsZero() {
		return 0, 0, nil
	}
	for _, state := range []store.State{store.StateQueued, store.StateClaimed} {
		p := store.WorkListParams{State: state, Limit: 1000, WithoutSealed: true}
		for {
			ws, err := st.WorkList(ctx, p)
			if err != nil {
				return 0, 0, err
			}
			for _, w := range ws {
				if !w.QueuedAt.After(taken) {
					ws = nil // listed newest first: the rest are older
					break
				}
				if w.IdempotencyKey != "" {
					continue
				}
				if state == store.StateQueued {
					queued++
				} else {
					claimed++
				}
			}
			if len(ws) < p.Limit {
				break
			}
			last := ws[len(ws)-1]
			p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
		}
	}
	return queued, claimed, nil
}

// carryRevocations revokes in st, the restored database, every API key the
// replaced one had revoked (after the backup was taken): a revocation is
// never undone by a restore. It returns the keys it revoked.
func carryRevocations(ctx context.Context, st store.Store, prevKeys []store.APIKey) ([]store.APIKey, error) {
	restored, err := st.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	revokedBefore := map[string]time.Time{}
	for _, k := range prevKeys {
		if !k.RevokedAt.IsZero() {
			revokedBefore[k.ID] = k.RevokedAt
		}
	}
	var out []store.APIKey
	for _, k := range restored {
		at, ok := revokedBefore[k.ID]
		if !ok || !k.RevokedAt.IsZero() {
			continue
		}
		r, err := st.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: k.ID, Now: at,
			Audit: cliEvent(store.AuditEvent{At: time.Now(), Kind: store.AuditAPIKeyRevoked,
				Detail: fmt.Sprintf("%s (%s), revoked again by a restore: the replaced database had revoked it", k.ID, k.Name)})})
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// carryDeletions deletes again in st, the restored database, every account
// the replaced one had deleted after the backup was taken: a deletion, which
// destroyed the account's token and key, is never undone by a restore. A
// deletion the restored database holds too (its tombstone) came before the
// backup, and an account of that name in it was made again afterwards; one
// it lacks came after, and deleted the account of that name the backup
// holds. It returns the deletions it made.
func carryDeletions(ctx context.Context, st store.Store, prevDeletions []store.AccountDeletion, now time.Time) ([]store.AccountDeletion, error) {
	restored, err := st.AccountDeletions(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	inBackup := map[string]bool{}
	for _, d := range restored {
		inBackup[d.Tombstone] = true
	}
	var out []store.AccountDeletion
	for _, p := range prevDeletions {
		if inBackup[p.Tombstone] {
			continue
		}
		reason := fmt.Sprintf("account %q was deleted after the backup was taken, and again by a restore", p.Name)
		d, err := st.AccountDelete(ctx, store.AccountDeleteParams{Name: p.Name, Reason: reason, Now: now,
			Audit: cliEvent(store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Detail: reason}),
			AuditDeletion: func(d store.AccountDeletion) []store.AuditEvent {
				return []store.AuditEvent{*cliEvent(store.AuditEvent{At: now, Kind: store.AuditAccountDeleted, Account: p.Name,
					Detail: fmt.Sprintf("deleted again by a restore: the replaced database had deleted it at %s; %d units kept unreadable as %q; API keys revoked: %s",
						p.DeletedAt.UTC().Format(time.RFC3339), d.Units, d.Tombstone, listOrNone(d.RevokedAPIKeys))})}
			}})
		if errors.Is(err, store.ErrNotFound) {
			continue // not in the backup, or deleted again already
		}
		if err != nil && !errors.Is(err, store.ErrWithdrawalInterrupted) && !errors.Is(err, store.ErrDeletionUnfinished) {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

// carrySignOuts records again in st, the restored database, every sign-out
// of a dashboard session the replaced one had recorded and st lacks: one
// made after the backup was taken. A session signed out of never works
// again because of a restore (its cookie would until it expired). It
// returns how many it recorded; it never prints or audits a session's id.
func carrySignOuts(ctx context.Context, st store.Store, prevSignOuts []store.DashboardSessionEndParams) (int, error) {
	restored, err := st.DashboardSessionEndList(ctx, time.Time{})
	if err != nil {
		return 0, err
	}
	inBackup := map[string]bool{}
	for _, e := range restored {
		inBackup[e.ID] = true
	}
	n := 0
	for _, e := range prevSignOuts {
		if inBackup[e.ID] {
			continue
		}
		if err := st.DashboardSessionEnd(ctx, e); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// accountWarnings compares the accounts of st, the restored database,
// with the replaced database's: an account made or rotated after the
// backup was taken is refused to the proxies given its newer profile. Each
// warning names the command that mends it, runnable as printed (with the
// data directory dir). An account whose token or key changed later in the
// backup than in the replaced database (changed, by the audit logs: a
// restore undone by restoring the database it kept aside) holds its newer
// ones: proxies given the latest profile are served, and rotating it
// again, as the warning said, would cut them all off (a review).
func accountWarnings(ctx context.Context, st store.Store, prev previous, changed map[string]time.Time, dir, db string) ([]string, error) {
	restored, err := st.AccountList(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]store.Account{}
	for _, a := range restored {
		byName[a.Name] = a
	}
	var lines []string
	for _, p := range prev.accounts {
		r, ok := byName[p.Name]
		differ := ok && (!bytes.Equal(r.TokenHash, p.TokenHash) || r.KeyID != p.KeyID)
		switch {
		// Both recorded: a side whose records were purged (past
		// audit_retention) tells nothing, and the warning stands (a
		// review: "nothing to rotate" of a token rotated after the
		// backup, the replaced database's records purged).
		case differ && !prev.changed[p.Name].IsZero() && changed[p.Name].After(prev.changed[p.Name]):
			lines = append(lines, fmt.Sprintf("account %s's token or key changed later in the backup (%s) than in the replaced database (%s): the restored database serves the proxies given its latest profile, and refuses those given an earlier one (nothing to rotate)",
				p.Name, changed[p.Name].UTC().Format(time.RFC3339), prev.changed[p.Name].UTC().Format(time.RFC3339)))
		case !ok:
			lines = append(lines, fmt.Sprintf("warning: account %s was made after the backup was taken and is not in it: its proxies are refused until it is made again (`automator account create %s --data-dir %s`%s) and they get its new profile", p.Name, p.Name, dir, withSameDB(db)))
		case differ:
			lines = append(lines, fmt.Sprintf("warning: account %s had its token or key rotated after the backup was taken: the restored database accepts its earlier token again and refuses proxies given the newer profile; run `automator account rotate-token %s --data-dir %s --overlap 0` (or rotate-key)%s and deploy the new profile", p.Name, p.Name, dir, withSameDB(db)))
		}
	}
	return lines, nil
}

// apiKeyWarnings names each API key the replaced database held, valid,
// that st, the restored database, lacks: one made after the backup was
// taken, whose callers are now refused as unknown. Each warning names the
// command that makes another, runnable as printed (with the data directory
// dir).
func apiKeyWarnings(ctx context.Context, st store.Store, prevKeys []store.APIKey, dir, db string) ([]string, error) {
	restored, err := st.APIKeyList(ctx)
	if err != nil {
		return nil, err
	}
	inBackup := map[string]bool{}
	for _, k := range restored {
		inBackup[k.ID] = true
	}
	var lines []string
	for _, k := range prevKeys {
		if inBackup[k.ID] || !k.RevokedAt.IsZero() {
			continue
		}
		scope := "--all-accounts"
		if len(k.Accounts) > 0 {
			scope = "--accounts " + shellArg(strings.Join(k.Accounts, ","))
		}
		lines = append(lines, fmt.Sprintf("warning: API key %s (%s) was made after the backup was taken and is not in it: its callers are refused as unauthenticated until they are given another (`automator apikey create %s --data-dir %s %s`%s)", k.ID, k.Name, shellArg(k.Name), shellArg(dir), scope, withSameDB(db)))
	}
	return lines, nil
}

// printCredentials says what the restore did about credentials withdrawn
// after the backup was taken, and what the operator must do again.
func printCredentials(env Env, dir, db string, prev previous, prevErr error, reRevoked []store.APIKey, reDeleted []store.AccountDeletion, signOuts int, accountLines []string) {
	for _, k := range reRevoked {
		fmt.Fprintf(env.Stdout, "API key %s (%s) was revoked after the backup was taken: revoked again\n", k.ID, k.Name)
	}
	for _, d := range reDeleted {
		fmt.Fprintf(env.Stdout, "account %q was deleted after the backup was taken: deleted again (its token and key destroyed; API keys revoked: %s)\n", d.Name, listOrNone(d.RevokedAPIKeys))
	}
	if signOuts > 0 {
		fmt.Fprintf(env.Stdout, "dashboard sign-outs made after the backup was taken, recorded again: %d (those sessions stay signed out)\n", signOuts)
	}
	for _, l := range accountLines {
		fmt.Fprintln(env.Stdout, l)
	}
	if prevErr != nil || !prev.exists {
		why := "there was no database to compare the backup with"
		if prevErr != nil {
			why = fmt.Sprintf("the replaced database could not be read (%v)", prevErr)
		}
		fmt.Fprintf(env.Stdout, "warning: %s: an API key revoked, an account token or key rotated, or an account deleted, after the backup was taken is valid again; check `automator apikey list --data-dir %s` and `automator account list --data-dir %s`%s, then revoke, rotate and delete again; a dashboard session signed out of since works again until it expires, unless its API key is revoked\n", why, dir, dir, withSameDB(db))
	}
}

// putInPlace puts the closed database file tmp (what: "the copy of the
// backup") in place of dbPath for the command cmd, keeping the replaced
// one as dbPath.tag-TIME (replaceDB), once tmp is whole on disk: no
// write-ahead log left beside it (closing it checkpointed the log), and
// synced. moved reports whether tmp has taken dbPath's place, error or
// not.
func putInPlace(dbPath, tmp string, now time.Time, cmd, tag, what string) (aside string, moved bool, err error) {
	if _, err := os.Stat(tmp + "-wal"); err == nil {
		return "", false, fmt.Errorf("%s, %s, still has a write-ahead log after it was closed; nothing was replaced", what, tmp)
	}
	_ = os.Remove(tmp + "-shm")
	if err := syncFile(tmp); err != nil {
		return "", false, fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if aside, err = replaceDB(dbPath, tmp, now, cmd, tag, what); err != nil {
		return "", false, err
	}
	if err := syncDir(filepath.Dir(dbPath)); err != nil {
		return aside, true, fmt.Errorf("syncing the directory of %s: %w", dbPath, err)
	}
	return aside, true, nil
}

// replaceDB puts the database file tmp (what: "the copy of the backup") in place of
// dbPath, for the command cmd, and returns the name the replaced database
// is kept under (dbPath.tag-TIME; "" when there was none). The
// replaced database keeps its write-ahead log, renamed with it (a restore
// read it and closed it, which checkpoints the log; a repair only read
// it), so it stays whole; its shared-memory index, rebuilt from the log,
// goes; a failed last rename puts them back. The
// new file takes dbPath's name in one rename, so dbPath always names a
// whole database, the old or the new.
func replaceDB(dbPath, tmp string, now time.Time, cmd, tag, what string) (string, error) {
	if _, err := os.Lstat(dbPath); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(tmp, dbPath); err != nil {
			return "", fmt.Errorf("putting %s in place: %w", what, err)
		}
		return "", nil
	}
	aside := dbPath + "." + tag + "-" + now.UTC().Format("20060102T150405Z")
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if _, err := os.Lstat(aside + suffix); err == nil {
			return "", fmt.Errorf("%s exists; wait a second and run %s again", aside+suffix, cmd)
		}
	}
	// The replaced database gets its second name first, a hard link, so
	// that dbPath is never missing (serve would make an empty database);
	// without hard links, a rename.
	linked := os.Link(dbPath, aside) == nil
	if !linked {
		if err := os.Rename(dbPath, aside); err != nil {
			return "", fmt.Errorf("keeping the replaced database aside as %s: %w", aside, err)
		}
	}
	if err := os.Rename(dbPath+"-wal", aside+"-wal"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("keeping the replaced database's write-ahead log aside: %w", err)
	}
	if err := os.Remove(dbPath + "-shm"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("removing the replaced database's shared-memory file: %w", err)
	}
	if err := os.Rename(tmp, dbPath); err != nil {
		// The database stays as it was: its log goes back beside it
		// (a repair's damaged database keeps commits there that it never
		// wrote into the file).
		if rerr := os.Rename(aside+"-wal", dbPath+"-wal"); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return "", fmt.Errorf("putting %s in place: %w; and the write-ahead log of %s could not be put back from %s: %v", what, err, dbPath, aside+"-wal", rerr)
		}
		if !linked {
			if rerr := os.Rename(aside, dbPath); rerr != nil {
				return "", fmt.Errorf("putting %s in place: %w; and %s could not be put back from %s: %v", what, err, dbPath, aside, rerr)
			}
			return "", fmt.Errorf("putting %s in place: %w; nothing was replaced", what, err)
		}
		_ = os.Remove(aside)
		return "", fmt.Errorf("putting %s in place: %w; nothing was replaced", what, err)
	}
	return aside, nil
}

// copyFile copies src to a new file dst, mode 0600, synced.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("reading the backup: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("copying the backup: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s to %s: %w", src, dst, err)
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("syncing %s: %w", dst, err)
	}
	return out.Close()
}

// restoreOpenWork ends the open units of the configured database, replacing
// nothing: after a database was restored by other means (PostgreSQL's
// pg_restore, a file system snapshot), before any automator serves it.
func restoreOpenWork(ctx context.Context, dir, db string, cfg config.Config, env Env) error {
	// SQLite: the data directory's alone, as for a restore of a FILE.
	// PostgreSQL: shared, as for any command; the replicas' heartbeats,
	// below, tell whether one serves.
	open := openStore
	if !pgstore.IsDSN(cfg.DB) {
		lock, err := lockForRestore(dir)
		if err != nil {
			return err
		}
		defer lock.Release()
		dbLock, err := lockSQLiteAlone(dir, cfg, "restore --open-work-only")
		if err != nil {
			return err
		}
		defer dbLock.Release()
		open = openLockedStore
	}
	st, err := open(ctx, dir, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	if pgstore.IsDSN(cfg.DB) {
		replicas, err := st.ReplicaList(ctx)
		if err != nil {
			return err
		}
		for _, r := range replicas {
			if ago := now.Sub(r.LastSeen); ago < replicaAliveWithin {
				return fmt.Errorf("replica %s (host %s) sent a heartbeat %s ago: stop every automator replica of %s first (a stopped one counts as alive for %s after its last heartbeat)",
					r.ReplicaID, r.Hostname, max(ago, 0).Round(time.Second), pgstore.Redact(cfg.DB), replicaAliveWithin)
			}
		}
		// A replica paused or frozen sends no heartbeat but still holds
		// its id, and may go on serving once it resumes.
		if pg, ok := store.Uncached(st).(*pgstore.Store); ok {
			held, err := pg.ReplicaIDsHeld(ctx)
			if err != nil {
				return err
			}
			if len(held) > 0 {
				id := held[len(held)-1]
				if id == "" {
					id = "(one no heartbeat names)"
				}
				return fmt.Errorf("replica %s still runs, though its heartbeats stopped (paused, or its host frozen): stop every automator replica of %s first", id, pgstore.Redact(cfg.DB))
			}
		}
	}
	queued, claimed, err := endOpenWork(ctx, st, now, restoreReason)
	if err != nil {
		return err
	}
	// A summary: each unit ended has its own event, written with its end.
	audit(ctx, st, store.AuditEvent{At: now, Kind: store.AuditRestore,
		Detail: fmt.Sprintf("open units of a restored database ended; %d units", queued+claimed)}, env)
	printEnded(env, queued, claimed)
	fmt.Fprintf(env.Stdout, "note: an API key revoked, an account token or key rotated, or an account deleted, after the backup was taken is valid again; check `automator apikey list --data-dir %s` and `automator account list --data-dir %s`%s, then revoke, rotate and delete again; a dashboard session signed out of since works again until it expires, unless its API key is revoked\n", dir, dir, withSameDB(db))
	return nil
}
