package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// cmdBackup writes a consistent copy of the SQLite database to FILE while
// serve may be running: `automator backup --data-dir DIR [--db DSN] FILE`.
// FILE must not exist; it is written mode 0600, under a temporary name in
// its directory, synced, then linked to its name, so it is whole or absent.
// The copy holds the database only: its secrets are sealed with the
// master key, which is not in it.
func cmdBackup(ctx context.Context, args []string, env Env) error {
	fs := newFlags("backup", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	pos, err := clihelp.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	file, err := oneArg(fs, "FILE", pos, "usage: automator backup --data-dir DIR [--db DSN] FILE")
	if err != nil {
		return err
	}
	if err := requireFlag("data-dir", *dir); err != nil {
		return err
	}
	if file == "" {
		return errors.New("backup: FILE is empty; name the new file to write the backup to")
	}
	cfg, err := loadConfig(*dir, *db)
	if err != nil {
		return err
	}
	if pgstore.IsDSN(cfg.DB) {
		return fmt.Errorf("the database is PostgreSQL (%s): back it up with PostgreSQL's own tools (pg_dump, or pg_basebackup for the whole cluster); see docs/backup.md", pgstore.Redact(cfg.DB))
	}
	if err := refuseExisting(file); err != nil {
		return err
	}
	lock, err := lockForCommand(*dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	dbPath := cfg.DBPath(*dir)
	if _, err := os.Stat(dbPath); err != nil {
		return fmt.Errorf("no database to back up at %s: %w", dbPath, err)
	}
	if err := refuseMigratingUnderServe(ctx, *dir, cfg); err != nil {
		return err
	}
	st, err := sqlitestore.Open(ctx, dbPath)
	if err != nil {
		return err
	}
	defer st.Close()
	// Made before the backup is recorded: a FILE whose directory is
	// missing or not writable records no backup.
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".partial-*")
	if err != nil {
		// Said of the directory the operator named, not of the temporary
		// file that could not be made in it.
		if d := filepath.Dir(file); errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat(d); errors.Is(serr, os.ErrNotExist) {
				return fmt.Errorf("backup: the directory %s of %s does not exist; make it first, private (mode 0700)", d, file)
			}
		}
		return fmt.Errorf("making the backup's temporary file beside %s: %w", file, err)
	}
	tmpPath := tmp.Name() // made mode 0600; VACUUM INTO fills an empty file
	tmp.Close()
	done := false
	defer func() {
		if !done {
			removeSQLiteFiles(tmpPath)
		}
	}()
	removeStaleParts(filepath.Dir(file), tmpPath, time.Now(), env)
	// Recorded before the copy, so that the copy holds it too: a restore
	// then tells when its backup was taken. How it ended is recorded
	// after, in the database only: an auditor told a backup that wrote
	// nothing (a full disk, Ctrl-C) from one that did by their records
	// alone, which said the same (a review).
	now := time.Now()
	audit(ctx, st, store.AuditEvent{At: now, Kind: store.AuditBackup, Detail: sqlitestore.BackupBeganDetail}, env)
	size, err := backupTo(ctx, st, tmpPath, file)
	if err != nil {
		audit(context.WithoutCancel(ctx), st, store.AuditEvent{At: time.Now(), Kind: store.AuditBackup, Detail: "backup of the database to " + file + " failed, nothing written: " + err.Error()}, env)
		return err
	}
	done = true
	audit(ctx, st, store.AuditEvent{At: time.Now(), Kind: store.AuditBackup, Detail: fmt.Sprintf("backup of the database written to %s: %d bytes", file, size)}, env)
	snap, err := sqlitestore.Inspect(ctx, file, file)
	if err != nil {
		return fmt.Errorf("checking the backup just written: %w", err)
	}
	fmt.Fprintf(env.Stdout, "backed up %s to %s (%d bytes, schema version %d, as of %s)\n",
		dbPath, file, size, snap.Version, now.UTC().Format(time.RFC3339))
	fmt.Fprintf(env.Stdout, "it holds the database only, its secrets sealed: keep %s, %s, %s and %s (and the API key files you made) backed up separately and privately\n",
		config.FileMasterKey, config.FileCAKey, config.FileKey, config.FileAPIKey)
	return nil
}

// backupTo copies the database of st to tmpPath, syncs it and gives it the
// name file, synced too, and returns its size.
func backupTo(ctx context.Context, st *sqlitestore.Store, tmpPath, file string) (int64, error) {
	if err := st.Backup(ctx, tmpPath); err != nil {
		return 0, err
	}
	if err := syncFile(tmpPath); err != nil {
		return 0, fmt.Errorf("syncing the backup %s: %w", tmpPath, err)
	}
	if err := linkNew(tmpPath, file); err != nil {
		return 0, err
	}
	removeSQLiteFiles(tmpPath)
	if err := syncDir(filepath.Dir(file)); err != nil {
		return 0, fmt.Errorf("syncing the directory of %s: %w", file, err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// staleAfter is how long a backup's temporary file (".FILE.partial-N")
// has not been written to before a later backup into its directory takes
// it for one left by a backup that was killed (SIGKILL, an OOM kill, a
// cron timeout; Ctrl-C removes its own), and removes it: each was a copy
// of the database that nothing else removed (a review), and a backup
// under way writes its file all along.
const staleAfter = 10 * time.Minute

// removeStaleParts removes the temporary files of backups killed before
// they ended from dir, but own (this backup's), and says which.
func removeStaleParts(dir, own string, now time.Time, env Env) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		base := strings.TrimSuffix(name, "-journal")
		i := strings.LastIndex(base, ".partial-")
		if !strings.HasPrefix(name, ".") || i < 0 || !allDigits(base[i+len(".partial-"):]) || filepath.Join(dir, name) == own || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < staleAfter || !ownedHere(fi) || !backupPart(filepath.Join(dir, name), fi, name != base) {
			continue
		}
		if os.Remove(filepath.Join(dir, name)) == nil {
			fmt.Fprintf(env.Stdout, "removed %s, left by a backup that did not finish (unchanged for %s)\n", filepath.Join(dir, name), now.Sub(fi.ModTime()).Round(time.Minute))
		}
	}
}

// backupPart tells whether the file at path (fi) holds what a backup's
// temporary file does: nothing yet, an SQLite database's start, or, for
// its rollback journal (journal), a journal's. A dot file of another
// program that happens to have the name is left alone (a review removed
// text files so named).
func backupPart(path string, fi os.FileInfo, journal bool) bool {
	if fi.Size() == 0 {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 16)
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	if journal {
		return bytes.Equal(head[:8], []byte{0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7})
	}
	return sqlitestore.StartsAsDatabase(head)
}

// allDigits tells whether s is one or more ASCII digits.
func allDigits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// refuseExisting refuses a backup's FILE that exists: a backup never
// overwrites a file.
func refuseExisting(file string) error {
	fi, err := os.Lstat(file)
	switch {
	case err == nil && fi.IsDir():
		// A directory given for the file (a review was told it
		// "exists", as a file would be).
		return fmt.Errorf("%s is a directory: name the backup's file in it, such as %s", file, filepath.Join(file, "automator-"+time.Now().UTC().Format("20060102T150405Z")+".db"))
	case err == nil:
		return fmt.Errorf("%s exists; a backup never overwrites a file: name a new one", file)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("checking %s: %w", file, err)
	}
	return nil
}

// linkNew gives the file at tmp the name file, which must not exist: a hard
// link, refused by the OS when file exists, so two backups at once never
// overwrite each other. On a file system without hard links, a rename
// after checking that file does not exist.
func linkNew(tmp, file string) error {
	err := os.Link(tmp, file)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrExist):
		return fmt.Errorf("%s exists (made while the backup was being taken); a backup never overwrites a file: name a new one", file)
	}
	if err := refuseExisting(file); err != nil {
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("naming the backup %s: %w", file, err)
	}
	return nil
}

// syncFile flushes the file at path to disk.
func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// removeSQLiteFiles removes a database file and the journal, write-ahead
// log and shared-memory files SQLite may have made beside it.
func removeSQLiteFiles(path string) {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		_ = os.Remove(path + suffix)
	}
}
