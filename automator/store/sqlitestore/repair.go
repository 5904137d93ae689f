package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
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

// maxProblems bounds the lines of integrity_check that Rebuild reads.
const maxProblems = 100

// Rebuild writes into dst, a new file, the automator database at src
// built again from its tables' rows: every table made from its schema
// and given its rows, read from the table itself and never through an
// index (with their rowids), then every index built again from those
// rows, and the triggers and views made. The indexes of src, where
// damage to a file most often lies (they are about half its pages),
// are not read at all, so a database whose indexes alone are damaged is
// rebuilt with nothing lost. A table whose rows cannot all be read is
// refused (a store.DamagedTablesError naming each one): Rebuild never makes a
// database with rows missing. src must be in use by no other process
// (its name, for messages, is name); a write-ahead log beside it is read
// with it. A database SQLite's integrity_check finds whole is refused
// with ErrWhole, and dst is then not made.
func Rebuild(ctx context.Context, src, dst, name string) (RebuildReport, error) {
	var rep RebuildReport
	if err := checkHeader(src, name); err != nil {
		return rep, err
	}
	if _, err := os.Lstat(dst); err == nil {
		return rep, fmt.Errorf("%s exists", dst)
	}
	// One connection: the rebuilt database, with the damaged one
	// attached. Not durable while it is built (a crash leaves a file to
	// remove, never a database in use); the caller syncs the file once
	// it is whole.
	q := "file:" + uriPath(dst) + "?_pragma=busy_timeout(5000)&_pragma=synchronous(OFF)&_pragma=foreign_keys(0)&_pragma=temp_store(MEMORY)"
	db, err := sql.Open("sqlite", q)
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
	if _, err := conn.ExecContext(ctx, `ATTACH DATABASE ? AS old`, src); err != nil {
		return rep, fmt.Errorf("opening %s: %w", name, err)
	}

	tables, err := schemaNames(ctx, conn, "table")
	if err != nil {
		return rep, unreadableSchema(name, err)
	}
	if !IsAutomators(tables) {
		return rep, fmt.Errorf("%s is an SQLite database but not an automator's (it lacks the %s tables): %w", name, prose.And(store.MissingAutomatorTables(tables)), ErrNotAutomatorDB)
	}
	rep.Problems, rep.Found, err = integrityCheck(ctx, conn, "old")
	if err != nil {
		return rep, unreadableSchema(name, err)
	}
	if rep.Found == 0 {
		return rep, ErrWhole
	}

	entries, err := schemaEntries(ctx, conn)
	if err != nil {
		return rep, unreadableSchema(name, err)
	}
	var damaged *store.DamagedTablesError
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
			if damaged == nil {
				damaged = &store.DamagedTablesError{Err: err}
			}
			damaged.Tables = append(damaged.Tables, e.name)
		case err != nil:
			return rep, fmt.Errorf("copying the rows of table %s: %w", e.name, err)
		}
		rep.Tables++
		rep.Rows += n
	}
	if damaged != nil {
		return rep, damaged
	}
	// AUTOINCREMENT's counters, so that no id is given twice (of the
	// tables that have one: a table dropped may have left its counter).
	var counters int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM main.sqlite_schema WHERE name = 'sqlite_sequence'`).Scan(&counters); err != nil {
		return rep, err
	}
	if counters > 0 && slices.Contains(tables, "sqlite_sequence") {
		if _, err := conn.ExecContext(ctx, `DELETE FROM main.sqlite_sequence`); err != nil {
			return rep, fmt.Errorf("copying sqlite_sequence: %w", err)
		}
		if _, err := conn.ExecContext(ctx, `INSERT INTO main.sqlite_sequence SELECT * FROM old.sqlite_sequence WHERE name IN (SELECT name FROM main.sqlite_schema)`); err != nil {
			if store.IsDamaged(err) {
				return rep, &store.DamagedTablesError{Tables: []string{"sqlite_sequence"}, Err: err}
			}
			return rep, fmt.Errorf("copying sqlite_sequence: %w", err)
		}
	}
	for _, e := range entries {
		if e.kind == "table" {
			continue
		}
		if _, err := conn.ExecContext(ctx, e.sql); err != nil {
			// A unique index that the copied rows break: two rows the
			// damaged database held under one key.
			return rep, fmt.Errorf("making %s %s from the rows copied: %w", e.kind, e.name, err)
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
	problems, found, err := integrityCheck(ctx, conn, "main")
	if err != nil {
		return rep, fmt.Errorf("checking the rebuilt database: %w", err)
	}
	if found > 0 {
		return rep, fmt.Errorf("the rebuilt database is not whole either (SQLite's integrity_check: %s)", strings.Join(problems[:min(len(problems), 3)], "; "))
	}
	var orphans int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_foreign_key_check`).Scan(&orphans); err != nil {
		return rep, fmt.Errorf("checking the rebuilt database's references: %w", err)
	}
	if orphans > 0 {
		return rep, fmt.Errorf("%d rows of %s refer to rows that are not there (SQLite's foreign_key_check): %w", orphans, name, store.ErrDamaged)
	}
	return rep, nil
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

// schemaNames lists the names of the attached database old's entries of
// a kind (table, index, …), SQLite's own included.
func schemaNames(ctx context.Context, conn *sql.Conn, kind string) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT name FROM old.sqlite_schema WHERE type = ? ORDER BY name`, kind)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
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
// generated ones, which SQLite computes), and whether its rowid is to be
// copied: the table has one, and no INTEGER PRIMARY KEY column names it.
func tableColumns(ctx context.Context, conn *sql.Conn, table string) (cols []string, rowid bool, err error) {
	var withoutRowid bool
	if err := conn.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE schema = 'old' AND name = ?`, table).Scan(&withoutRowid); err != nil {
		return nil, false, err
	}
	rows, err := conn.QueryContext(ctx, `SELECT name, type, pk, hidden FROM pragma_table_xinfo(?, 'old')`, table)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	pks, aliased := 0, false
	for rows.Next() {
		var name, typ string
		var pk, hidden int
		if err := rows.Scan(&name, &typ, &pk, &hidden); err != nil {
			return nil, false, err
		}
		if pk > 0 {
			pks++
			aliased = strings.EqualFold(typ, "INTEGER")
		}
		if hidden == 0 {
			cols = append(cols, quoteIdent(name))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	return cols, !withoutRowid && !(pks == 1 && aliased), nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// integrityCheck runs SQLite's integrity_check on schema, and returns the
// first of its lines that are not "ok" (at most 10) and how many there
// were. A check that SQLite itself stops, finding a page it cannot read
// past, counts that as one more line.
func integrityCheck(ctx context.Context, conn *sql.Conn, schema string) ([]string, int, error) {
	var lines []string
	n := 0
	add := func(l string) {
		n++
		if len(lines) < 10 {
			lines = append(lines, l)
		}
	}
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(`PRAGMA %s.integrity_check(%d)`, schema, maxProblems))
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
