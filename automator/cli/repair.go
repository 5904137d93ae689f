package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/clihelp"
)

// repairHint is what serve's log says to do about a damaged database.
func repairHint(dir, db string, cfg config.Config) string {
	if pgstore.IsDSN(cfg.DB) {
		return fmt.Sprintf("run `automator repair --data-dir %s%s`, which rebuilds the indexes from the tables' rows while the replicas serve (docs/backup.md)", dir, withSameDB(db))
	}
	return fmt.Sprintf("stop serve, then run `automator repair --data-dir %s%s` (docs/backup.md)", dir, withSameDB(db))
}

// repairPG rebuilds every index of the automator's tables in PostgreSQL
// from the tables' rows (pgstore.Reindex), while the replicas serve: a
// damaged index is repaired with nothing lost. Damaged rows are not:
// restoring a backup is the way back.
func repairPG(ctx context.Context, dir, db string, cfg config.Config, env Env) error {
	st, err := openStore(ctx, dir, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	pg, ok := store.Uncached(st).(*pgstore.Store)
	if !ok {
		return fmt.Errorf("the database %s is not PostgreSQL's", pgstore.Redact(cfg.DB))
	}
	tables, indexes, err := pg.Reindex(ctx)
	var dt *store.DamagedTablesError
	switch {
	case errors.As(err, &dt):
		fmt.Fprintf(env.Stdout, "rebuilt the %d indexes of %d tables from their rows\n", indexes, tables)
		return fmt.Errorf("the database %s is damaged, and %v: their indexes cannot be rebuilt, nor the rows read; restore the database from a backup with PostgreSQL's tools, then run `automator restore --data-dir %s%s --open-work-only` before any replica starts (docs/backup.md)", pgstore.Redact(cfg.DB), err, dir, withSameDB(db))
	case err != nil:
		return fmt.Errorf("rebuilding the indexes of %s: %w", pgstore.Redact(cfg.DB), err)
	}
	audit(ctx, st, store.AuditEvent{At: time.Now(), Kind: store.AuditRepair,
		Detail: fmt.Sprintf("indexes rebuilt from their tables' rows (REINDEX): %d tables, %d indexes", tables, indexes)}, env)
	fmt.Fprintf(env.Stdout, "rebuilt the %d indexes of the %d tables of %s from their rows (REINDEX TABLE): a damaged index is whole again, with nothing lost\n", indexes, tables, pgstore.Redact(cfg.DB))
	return nil
}

// cmdRepair rebuilds a damaged SQLite database from its tables' rows, in
// its place, with serve stopped (with PostgreSQL, the indexes, while the
// replicas serve: repairPG):
//
//	automator repair --data-dir DIR [--db DSN]
//
// Its indexes, where damage most often lies, are built again from the
// rows, so a database whose indexes alone are damaged loses nothing; its
// units stay as they were, open ones included (unlike a restore, nothing
// here is older than what the proxies did). A database some of whose
// rows cannot be read is left as it is: a backup is then the way back.
func cmdRepair(ctx context.Context, args []string, env Env) error {
	flags := newFlags("repair", env)
	dir := flags.String("data-dir", "", "the automator's data directory (with SQLite, its serve must be stopped)")
	db := dbFlag(flags)
	trustRows := flags.Bool("trust-rows", false, "SQLite: rebuild a table whose rows its indexes, in the damaged file, list otherwise or do not confirm (the table's pages are taken as right, but a unit held as queued that no index confirms is ended, not run)")
	salvage := flags.Bool("salvage", false, "SQLite: keep the rows of units, audit events, instances and replicas that can be read when some cannot, and name those lost (lost units are kept as ended, timed out)")
	if err := clihelp.ParseNoArgs(flags, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*dir, *db)
	if err != nil {
		return err
	}
	if pgstore.IsDSN(cfg.DB) {
		return repairPG(ctx, *dir, *db, cfg, env)
	}
	lock, err := lockAlone(*dir, "repair")
	if err != nil {
		return err
	}
	defer lock.Release()
	dbLock, err := lockSQLiteAlone(*dir, cfg, "repair")
	if err != nil {
		return err
	}
	defer dbLock.Release()
	dbPath := cfg.DBPath(*dir)
	fi, err := os.Lstat(dbPath)
	if err != nil {
		return fmt.Errorf("reading the database: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 { // repaired where the link leads, as restore does
		if dbPath, err = filepath.EvalSymlinks(dbPath); err != nil {
			return fmt.Errorf("the database %s is a symbolic link that does not lead to a file: %w", cfg.DBPath(*dir), err)
		}
	}

	// The database is rebuilt beside it, checked, and only then takes its
	// place: until that rename nothing of the data directory has changed.
	tmp := dbPath + ".repairing"
	removeSQLiteFiles(tmp) // left by a repair that was interrupted
	done := false
	defer func() {
		if !done {
			removeSQLiteFiles(tmp)
		}
	}()
	now := time.Now()
	rep, err := sqlitestore.Rebuild(ctx, dbPath, tmp, dbPath, sqlitestore.RebuildOptions{TrustRows: *trustRows, Salvage: *salvage, Now: now})
	var dt *store.DamagedTablesError
	switch {
	case errors.Is(err, sqlitestore.ErrWhole):
		fmt.Fprintf(env.Stdout, "%s is whole (SQLite's integrity_check: ok, and each index agrees with its table): nothing to repair\n", dbPath)
		return nil
	case errors.As(err, &dt):
		return fmt.Errorf("%s: %v: repair builds a database again from its tables' rows, so it cannot make this one whole without losing rows; %s; nothing was changed", dbPath, err, salvageOrRestore(dt, *salvage, *dir, *db))
	case store.IsDamaged(err):
		return fmt.Errorf("%s is damaged, and repair cannot build it again from its tables' rows: %v; restore the latest backup instead (`automator restore --data-dir %s%s FILE`, see docs/backup.md); nothing was changed", dbPath, err, *dir, withSameDB(*db))
	case err != nil:
		return fmt.Errorf("repairing %s (nothing was changed): %w", dbPath, err)
	}
	if err := keepOwner(tmp, dbPath); err != nil {
		return fmt.Errorf("giving %s the owner of %s: %w", tmp, dbPath, err)
	}
	// Opened as serve opens it (migrated to this binary's schema, in WAL
	// mode), to record the repair in it before it takes the database's
	// place.
	version, latest, err := sqlitestore.SchemaVersion(ctx, tmp)
	if err != nil {
		return fmt.Errorf("reading the rebuilt database (nothing was replaced): %w", err)
	}
	st, err := sqlitestore.Open(ctx, tmp)
	if err != nil {
		// Its migration failed: a row of schema_migrations lost where no
		// check could see it, say.
		return fmt.Errorf("opening the rebuilt database (nothing was replaced; restore the latest backup, see docs/backup.md): %w", err)
	}
	_, err = st.AuditAppend(ctx, *cliEvent(store.AuditEvent{At: now, Kind: store.AuditRepair,
		Detail: fmt.Sprintf("database rebuilt from its tables' rows: %d tables, %d rows, %d indexes built again; SQLite's integrity_check had found %s%s%s", rep.Tables, rep.Rows, rep.Indexes, problemCount(rep.Found), lostDetail(rep.Lost), endedDetail(rep))}))
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("recording the repair in the rebuilt database (nothing was replaced): %w", err)
	}
	aside, moved, err := putInPlace(dbPath, tmp, now, "repair", "damaged", "the rebuilt database")
	done = moved
	if err != nil {
		return err
	}

	fmt.Fprintf(env.Stdout, "%s was damaged: SQLite's integrity_check found %s: %s\n", dbPath, problemCount(rep.Found), strings.Join(rep.Problems[:min(len(rep.Problems), 3)], "; "))
	migrated := ""
	if version < latest {
		migrated = fmt.Sprintf(", migrated from schema version %d to %d", version, latest)
	}
	if len(rep.Lost) == 0 {
		fmt.Fprintf(env.Stdout, "rebuilt it from its tables' rows, no row lost or changed as far as SQLite's check and the damaged file's indexes tell: %d tables, %d rows, %d indexes built again%s\n", rep.Tables, rep.Rows, rep.Indexes, migrated)
	} else {
		fmt.Fprintf(env.Stdout, "salvaged it: rebuilt it from the rows of its tables that could be read, no other row lost or changed as far as SQLite's check and the damaged file's indexes tell: %d tables, %d rows, %d indexes built again%s\n", rep.Tables, rep.Rows, rep.Indexes, migrated)
		for _, l := range rep.Lost {
			fmt.Fprintf(env.Stdout, "lost: %s\n", l)
			if l.Table != "work" {
				continue
			}
			if l.Kept > 0 {
				fmt.Fprintln(env.Stdout, "a unit lost and kept as ended says so in its reason (`automator work show ID`); its caller gets it as timed out (it may have run), and a retry with its idempotency key returns it rather than running its script again")
			}
			if l.Kept < l.Rows || !l.Known {
				fmt.Fprintln(env.Stdout, "a unit lost and not kept (no index read kept its account, or none named it) is not found by its id, and a retry with its idempotency key would run its script again: look for its work.queued event (`automator audit --kind work.queued`)")
			}
		}
	}
	if rep.EndedCount > 0 {
		fmt.Fprintf(env.Stdout, "ended %s held as queued that no index confirmed (%s%s): each may have been claimed and run already; their callers get them as timed out, and a retry with the same idempotency key returns them\n",
			unitCount(rep.EndedCount), strings.Join(rep.Ended, ", "), more(rep.EndedCount, len(rep.Ended)))
	}
	fmt.Fprintf(env.Stdout, "the damaged database is kept as %s\n", aside)
	fmt.Fprintln(env.Stdout, "start serve again; then take a backup (`automator backup`)")
	return nil
}

// problemCount says how many problems integrity_check found.
func problemCount(n int) string {
	switch {
	case n == 1:
		return "1 problem"
	case n >= sqlitestore.MaxProblems:
		return fmt.Sprintf("%d problems or more (it stops there)", n)
	}
	return fmt.Sprintf("%d problems", n)
}

// salvageOrRestore says what to do about tables whose rows are damaged:
// repair again with --salvage, where that would keep the rows that can
// be read (not rows its indexes list otherwise, which it refuses too), or
// restore the latest backup.
func salvageOrRestore(dt *store.DamagedTablesError, salvage bool, dir, db string) string {
	restore := fmt.Sprintf("restore the latest backup instead (`automator restore --data-dir %s%s FILE`, see docs/backup.md)", dir, withSameDB(db))
	if errors.Is(dt.Err, sqlitestore.ErrRowsDiffer) {
		return restore
	}
	for _, t := range dt.Tables {
		if !sqlitestore.Salvaged[t] || salvage {
			return restore
		}
	}
	return fmt.Sprintf("%s, or run repair again with --salvage, which keeps the rows that can be read and names those lost (docs/backup.md)", restore)
}

// lostDetail says, for the repair's audit event, what a salvage lost.
func lostDetail(lost []sqlitestore.LostRows) string {
	if len(lost) == 0 {
		return ""
	}
	parts := make([]string, len(lost))
	for i, l := range lost {
		parts[i] = l.String()
	}
	return "; salvaged, and lost " + strings.Join(parts, "; ")
}

// endedDetail says, for the repair's audit event, the units ended as no
// index confirmed them queued.
func endedDetail(rep sqlitestore.RebuildReport) string {
	if rep.EndedCount == 0 {
		return ""
	}
	return fmt.Sprintf("; ended %s held as queued that no index confirmed: %s%s", unitCount(rep.EndedCount), strings.Join(rep.Ended, ", "), more(rep.EndedCount, len(rep.Ended)))
}

// more is " and N more" for n things of which shown were named, or "".
func more(n, shown int) string {
	if n > shown {
		return fmt.Sprintf(" and %d more", n-shown)
	}
	return ""
}
