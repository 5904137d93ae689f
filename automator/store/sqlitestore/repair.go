package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/prose"
)

// ErrWhole is Rebuild's answer for a database SQLite's integrity_check
// finds whole: there is nothing to repair.
var ErrWhole = errors.New("the database is whole")

// RebuildReport says what Rebuild found and made.
type RebuildReport struct {
	// Problems are the first lines of SQLite's integrity_check of the
	// damaged database (at most 10), and Found how many it wrote.
	Problems []string
	Found    int
	// Tables and Rows count the tables rebuilt and the rows copied into
	// them; Indexes the indexes built again from those rows.
	Tables, Indexes int
	Rows            int64
}

// MaxProblems bounds the problems integrity_check reports to Rebuild.
const MaxProblems = 100

// Rebuild writes into dst, a new file (mode 0600), the automator database
// at src built again from its tables' rows: every table made from its
// schema and given its rows, read from the table itself and never through
// an index (with their rowids), then every index built again from those
// rows, and the triggers and views made. The damaged database's indexes,
// where damage to a file most often lies (they are about half its pages),
// are not copied, so a database whose indexes alone are damaged is rebuilt
// with nothing lost.
//
// Rows are never lost quietly. A table whose rows cannot all be read is
// refused, and so is one that reads with no error but holds fewer rows,
// or other values, than an index of the damaged database that can still
// be read in full lists for it (a page of the table cut short or
// changed): a store.DamagedTablesError names each such table. The other
// refusals (a file cut short, rows that break the schema's constraints or
// refer to rows that are not there) match store.ErrDamaged too; an error
// that does not (a full disk) is the writing of dst's.
//
// src is read only, its write-ahead log with it, and must be in use by
// no other process (its name, for messages, is name). A database SQLite's
// integrity_check finds whole is refused with ErrWhole, and dst is then
// not made. On any other error dst may be left behind, for the caller to
// remove.
func Rebuild(ctx context.Context, src, dst, name string) (RebuildReport, error) {
	var rep RebuildReport
	if err := checkHeader(src, name); err != nil {
		return rep, damaged(err)
	}
	// Opening a database in WAL mode makes its -wal and -shm files, read
	// only too: those that were not there go once it is closed (this
	// function's other deferred calls close it first).
	var made []string
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Lstat(src + suffix); errors.Is(err, fs.ErrNotExist) {
			made = append(made, src+suffix)
		}
	}
	defer func() {
		for _, p := range made {
			_ = os.Remove(p)
		}
	}()
	old := "file:" + uriPath(src) + "?mode=ro"
	if err := check(ctx, old, name, &rep); err != nil {
		return rep, err
	}
	f, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return rep, err
	}
	if err := f.Close(); err != nil {
		return rep, err
	}
	// One connection: the rebuilt database, with the damaged one
	// attached, read only. Not durable while it is built (a crash leaves a
	// file to remove, never a database in use); the caller syncs the file
	// once it is whole.
	db, err := sql.Open("sqlite", "file:"+uriPath(dst)+"?_pragma=busy_timeout(5000)&_pragma=synchronous(OFF)&_pragma=foreign_keys(0)")
	if err != nil {
		return rep, err
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return rep, fmt.Errorf("making %s: %w", dst, err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS old`, old); err != nil {
		return rep, unreadableSchema(name, err)
	}
	entries, err := schemaEntries(ctx, conn)
	if err != nil {
		return rep, unreadableSchema(name, err)
	}
	var refused *store.DamagedTablesError
	lost := func(table string, err error) {
		if refused == nil {
			refused = &store.DamagedTablesError{Err: err}
		}
		refused.Tables = append(refused.Tables, table)
	}
	for _, e := range entries {
		if e.kind != "table" {
			continue
		}
		if _, err := conn.ExecContext(ctx, e.sql); err != nil {
			return rep, fmt.Errorf("making table %s: %w", e.name, err)
		}
		n, err := copyRows(ctx, conn, e.name)
		switch {
		case err != nil && store.IsDamaged(err):
			lost(e.name, err)
			continue
		case err != nil:
			// A row that breaks the table's constraints: a value changed.
			return rep, damaged(fmt.Errorf("copying the rows of table %s: %w", e.name, err))
		}
		if err := compareIndexes(ctx, conn, e.name); err != nil {
			if !store.IsDamaged(err) {
				return rep, err
			}
			lost(e.name, err)
			continue
		}
		rep.Tables++
		rep.Rows += n
	}
	if refused != nil {
		return rep, refused
	}
	for _, e := range entries {
		if e.kind == "table" {
			continue
		}
		if _, err := conn.ExecContext(ctx, e.sql); err != nil {
			// A unique index that the copied rows break: two rows the
			// damaged database held under one key.
			return rep, damaged(fmt.Errorf("making %s %s from the rows copied: %w", e.kind, e.name, err))
		}
		if e.kind == "index" {
			rep.Indexes++
		}
	}
	for _, p := range []string{"user_version", "application_id"} {
		var v int64
		if err := conn.QueryRowContext(ctx, `PRAGMA old.`+p).Scan(&v); err != nil {
			return rep, fmt.Errorf("reading %s of %s: %w", p, name, err)
		}
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`PRAGMA main.%s = %d`, p, v)); err != nil {
			return rep, fmt.Errorf("setting %s: %w", p, err)
		}
	}

	// What was made is checked as any database: whole, and with no row
	// referring to one that is not there.
	problems, found, err := integrityCheck(ctx, conn, "main", "integrity_check")
	if err != nil {
		return rep, fmt.Errorf("checking the rebuilt database: %w", err)
	}
	if found > 0 {
		return rep, damaged(fmt.Errorf("the rebuilt database is not whole either (SQLite's integrity_check: %s)", strings.Join(problems[:min(len(problems), 3)], "; ")))
	}
	var orphans int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_foreign_key_check`).Scan(&orphans); err != nil {
		return rep, fmt.Errorf("checking the rebuilt database's references: %w", err)
	}
	if orphans > 0 {
		return rep, damaged(fmt.Errorf("%d rows of %s refer to rows that are not there (SQLite's foreign_key_check)", orphans, name))
	}
	return rep, nil
}

// damagedError is err, which says how a database is damaged, as an error
// that matches store.ErrDamaged.
type damagedError struct{ err error }

func (e damagedError) Error() string   { return e.err.Error() }
func (e damagedError) Unwrap() []error { return []error{store.ErrDamaged, e.err} }

func damaged(err error) error { return damagedError{err} }

// check reads the database at the URI old (read only): an automator's,
// and, by SQLite's integrity_check, damaged (rep's Problems and Found), or
// ErrWhole.
func check(ctx context.Context, old, name string, rep *RebuildReport) error {
	db, err := sql.Open("sqlite", old)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return unreadableSchema(name, err)
	}
	defer conn.Close()
	tables, err := tableNames(ctx, conn)
	if err != nil {
		return unreadableSchema(name, err)
	}
	if !IsAutomators(tables) {
		return fmt.Errorf("%s is an SQLite database but not an automator's (it lacks the %s tables): %w", name, prose.And(store.MissingAutomatorTables(tables)), ErrNotAutomatorDB)
	}
	rep.Problems, rep.Found, err = integrityCheck(ctx, conn, "main", "integrity_check")
	if err != nil {
		return unreadableSchema(name, err)
	}
	if rep.Found == 0 {
		return ErrWhole
	}
	return nil
}

// compareIndexes reads, for table (copied into main), each index the
// damaged database old has of it in full (not partial, on columns alone)
// that can still be read, and returns an error matching store.ErrDamaged
// when they show that the table's pages lost or changed rows that read
// without an error: rows an index lists that the copy lacks, or holds
// with other values in the index's columns. Each index is a copy of its
// columns of every row, so a row the table lost or changed shows in every
// one that has the column; one index alone that disagrees, while another
// agrees, is that index's damage (it is rebuilt), unless it is the only
// one that can be read. An index that cannot be read is passed over (it
// is damaged itself); a row the copy has and an index lacks is an index's
// damage too.
func compareIndexes(ctx context.Context, conn *sql.Conn, table string) error {
	indexes, err := fullIndexes(ctx, conn, table)
	if err != nil {
		return err
	}
	t := quoteIdent(table)
	read := 0
	var differ []string
	var first error
	for _, ix := range indexes {
		cols := "rowid"
		for _, c := range ix.cols {
			cols += ", " + quoteIdent(c)
		}
		var n int64
		err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT COUNT(*) FROM (SELECT %s FROM old.%s INDEXED BY %s EXCEPT SELECT %s FROM main.%s NOT INDEXED)`,
			cols, t, quoteIdent(ix.name), cols, t)).Scan(&n)
		switch {
		case err != nil && store.IsDamaged(err):
			continue
		case err != nil:
			return fmt.Errorf("comparing table %s with its index %s: %w", table, ix.name, err)
		}
		read++
		if n > 0 {
			differ = append(differ, ix.name)
			if first == nil {
				first = fmt.Errorf("its index %s lists %d rows that its pages no longer hold, or hold with other values", ix.name, n)
			}
		}
	}
	if len(differ) >= 2 || (len(differ) == 1 && read == 1) {
		if len(differ) > 1 {
			first = fmt.Errorf("%w (and so do %s)", first, prose.And(differ[1:]))
		}
		return damaged(first)
	}
	return nil
}

type index struct {
	name string
	cols []string
}

// fullIndexes lists the indexes of table in old that hold every row
// (not partial) on its columns alone (no expression), with their columns.
// A table without rowids has none listed.
func fullIndexes(ctx context.Context, conn *sql.Conn, table string) ([]index, error) {
	var withoutRowid bool
	if err := conn.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE schema = 'old' AND name = ?`, table).Scan(&withoutRowid); err != nil {
		return nil, err
	}
	if withoutRowid {
		return nil, nil
	}
	rows, err := conn.QueryContext(ctx, `SELECT name FROM pragma_index_list(?, 'old') WHERE partial = 0 ORDER BY name`, table)
	if err != nil {
		return nil, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []index
next:
	for _, n := range names {
		rows, err := conn.QueryContext(ctx, `SELECT cid, COALESCE(name, '') FROM pragma_index_info(?, 'old') ORDER BY seqno`, n)
		if err != nil {
			return nil, err
		}
		ix := index{name: n}
		expr := false
		for rows.Next() {
			var cid int
			var col string
			if err := rows.Scan(&cid, &col); err != nil {
				rows.Close()
				return nil, err
			}
			switch {
			case cid == -2:
				expr = true
			case cid >= 0:
				ix.cols = append(ix.cols, col)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if expr {
			continue next
		}
		out = append(out, ix)
	}
	return out, nil
}

// unreadableSchema is Rebuild's error when the damaged database's own
// list of tables and indexes cannot be read.
func unreadableSchema(name string, err error) error {
	if store.IsDamaged(err) {
		return &store.DamagedTablesError{Tables: []string{"sqlite_schema"}, Err: fmt.Errorf("the list of %s's tables and indexes: %w", name, err)}
	}
	return fmt.Errorf("reading %s: %w", name, err)
}

type schemaEntry struct{ kind, name, sql string }

// schemaEntries lists what the attached database old is made of, in the
// order it was made: tables, indexes, triggers and views that have SQL
// (not SQLite's own tables, nor the indexes it makes for a table's
// UNIQUE and PRIMARY KEY constraints, which making the table makes).
func schemaEntries(ctx context.Context, conn *sql.Conn) ([]schemaEntry, error) {
	rows, err := conn.QueryContext(ctx, `SELECT type, name, sql FROM old.sqlite_schema
		WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY rowid`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var entries []schemaEntry
	for rows.Next() {
		var e schemaEntry
		if err := rows.Scan(&e.kind, &e.name, &e.sql); err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return entries, rows.Err()
}

// copyRows copies the rows of table from old into main, with their rowids
// where the table has them, reading the table itself and none of its
// indexes (NOT INDEXED).
func copyRows(ctx context.Context, conn *sql.Conn, table string) (int64, error) {
	cols, rowid, err := tableColumns(ctx, conn, table)
	if err != nil {
		return 0, err
	}
	list := strings.Join(cols, ", ")
	if rowid {
		list = "rowid, " + list
	}
	t := quoteIdent(table)
	res, err := conn.ExecContext(ctx, fmt.Sprintf(`INSERT INTO main.%s (%s) SELECT %s FROM old.%s NOT INDEXED`, t, list, list, t))
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// tableColumns lists the stored columns of table in old, quoted (not the
// generated ones, which SQLite computes), and whether it has rowids, which
// are copied too (as rowid beside the column that may alias it: SQLite
// takes both as one).
func tableColumns(ctx context.Context, conn *sql.Conn, table string) (cols []string, rowid bool, err error) {
	var withoutRowid bool
	if err := conn.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE schema = 'old' AND name = ?`, table).Scan(&withoutRowid); err != nil {
		return nil, false, err
	}
	rows, err := conn.QueryContext(ctx, `SELECT name, hidden FROM pragma_table_xinfo(?, 'old')`, table)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var hidden int
		if err := rows.Scan(&name, &hidden); err != nil {
			return nil, false, err
		}
		if hidden == 0 {
			cols = append(cols, quoteIdent(name))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return cols, !withoutRowid, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// integrityCheck runs SQLite's check (integrity_check, or quick_check) on
// schema, and returns the first of its lines that are not "ok" (at most
// 10) and how many there were. A check that SQLite itself stops, finding a
// page it cannot read past, counts that as one more line.
func integrityCheck(ctx context.Context, conn *sql.Conn, schema, check string) ([]string, int, error) {
	var lines []string
	n := 0
	add := func(l string) {
		n++
		if len(lines) < 10 {
			lines = append(lines, l)
		}
	}
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(`PRAGMA %s.%s(%d)`, schema, check, MaxProblems))
	if err != nil {
		if store.IsDamaged(err) {
			add(err.Error())
			return lines, n, nil
		}
		return nil, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, 0, err
		}
		if l == "ok" {
			continue
		}
		for part := range strings.SplitSeq(strings.TrimSpace(l), "\n") {
			if part = strings.TrimSpace(part); part != "" && !strings.HasPrefix(part, "***") {
				add(part)
			}
		}
	}
	if err := rows.Err(); err != nil {
		if !store.IsDamaged(err) {
			return nil, 0, err
		}
		add("the check stopped: " + err.Error())
	}
	return lines, n, nil
}

// QuickCheck runs SQLite's quick_check on the database, on a read
// connection: every page is read and checked, not each index against its
// table (about a second for 500 MB here). It returns the first problems
// it reports (at most 10) and how many (none: the database is whole, as
// far as that check sees), or the error that kept it from checking.
func (s *Store) QuickCheck(ctx context.Context) ([]string, int, error) {
	conn, err := s.read.Conn(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	return integrityCheck(ctx, conn, "main", "quick_check")
}
