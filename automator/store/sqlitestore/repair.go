package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

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
	// Lost says, table by table, the rows a salvage could not read
	// (RebuildOptions.Salvage); none without one.
	Lost []LostRows
	// Ended names the first of the units held as queued that, with the
	// rows trusted (RebuildOptions.TrustRows), were ended as no index
	// confirmed them (at most 20), and EndedCount counts them all.
	Ended      []string
	EndedCount int
}

// RebuildOptions says what Rebuild may take as right, or do without.
type RebuildOptions struct {
	// TrustRows: a table whose rows the damaged file's indexes list
	// otherwise is rebuilt from its rows, taken as right.
	TrustRows bool
	// Salvage: a table of Salvaged whose rows cannot all be read keeps
	// those that can, and the others are lost, said in
	// RebuildReport.Lost and stood in for as Salvaged says; rows that
	// read with other values than an index lists are still refused
	// (unless TrustRows).
	Salvage bool
	// Now stamps what a salvage writes.
	Now time.Time
}

// MaxProblems bounds the problems integrity_check reports to Rebuild,
// which reads them all to tell which tables they lie on.
const MaxProblems = 10000

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
// no other process (its name, for messages, is name). With opts.Salvage,
// a table of Salvaged whose rows cannot all be read is salvaged rather
// than refused (RebuildOptions). A database SQLite's
// integrity_check finds whole is refused with ErrWhole, and dst is then
// not made. On any other error dst may be left behind, for the caller to
// remove.
func Rebuild(ctx context.Context, src, dst, name string, opts RebuildOptions) (RebuildReport, error) {
	var rep RebuildReport
	if err := regularFile(src); err != nil {
		return rep, err // not damage: no backup is needed
	}
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
	findings, err := check(ctx, old, name, &rep)
	if err != nil {
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
	// What integrity_check found on the tables themselves (their b-trees,
	// their pages, their rows' values) is rows lost or changed: refused
	// before anything is copied. What it found on indexes is what the
	// rebuild mends.
	salvaged := func(table string) bool {
		return opts.Salvage && Salvaged[table]
	}
	if err := blameTables(ctx, conn, findings, salvaged, opts.Salvage); err != nil {
		return rep, err
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
		unreadable := err != nil && store.IsDamaged(err)
		tailLost := false
		switch {
		case unreadable && salvaged(e.name):
			n, tailLost, err = salvageRows(ctx, conn, e.name)
			if err != nil {
				return rep, fmt.Errorf("salvaging the rows of table %s: %w", e.name, err)
			}
		case unreadable:
			lost(e.name, err)
			continue
		case isConstraint(err):
			// A row that breaks the table's constraints: a value changed,
			// or a page written where another belongs.
			return rep, twoRows(quoteIdent(e.name), err)
		case err != nil:
			return rep, fmt.Errorf("copying the rows of table %s: %w", e.name, err)
		}
		var gone map[int64]*lostRow
		var known bool
		if salvaged(e.name) {
			// Rows an index lists that the copy lacks: read one by one,
			// or lost.
			if gone, known, err = recoverListed(ctx, conn, e.name); err != nil {
				return rep, fmt.Errorf("salvaging the rows of table %s: %w", e.name, err)
			}
		}
		c, err := compareIndexes(ctx, conn, e.name, salvaged(e.name))
		if err != nil {
			return rep, err
		}
		if e.name == "work" {
			if err := c.endedInAudit(ctx, conn); err != nil {
				return rep, err
			}
		}
		if !opts.TrustRows {
			if err := c.differ(); err != nil {
				lost(e.name, err)
				continue
			}
			if e.name == "work" {
				if err := confirmOpen(ctx, conn, c); err != nil {
					if !store.IsDamaged(err) {
						return rep, err
					}
					lost(e.name, err)
					continue
				}
			}
		} else if e.name == "work" {
			if rep.Ended, rep.EndedCount, err = endDoubtful(ctx, conn, c, opts.Now); err != nil {
				return rep, fmt.Errorf("ending the units no index confirms as queued: %w", err)
			}
		}
		if salvaged(e.name) {
			// The rows copied, those read one by one among them.
			if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM main.`+quoteIdent(e.name)).Scan(&n); err != nil {
				return rep, err
			}
		}
		if e.name == "audit" && unreadable && salvaged(e.name) {
			if err := auditGaps(ctx, conn, gone, tailLost && !known); err != nil {
				return rep, fmt.Errorf("salvaging the rows of table %s: %w", e.name, err)
			}
		}
		if len(gone) > 0 || (unreadable && !known) {
			l, err := keepLost(ctx, conn, e.name, gone, known, opts.Now)
			if err != nil {
				return rep, err
			}
			rep.Lost = append(rep.Lost, l)
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

// silently wraps err so that it matches but adds nothing to a message:
// "%w" of it at the end of a message's format.
func silently(err error) error { return silentError{err} }

type silentError struct{ err error }

func (e silentError) Error() string { return "" }
func (e silentError) Unwrap() error { return e.err }

// damagedError is err, which says how a database is damaged, as an error
// that matches store.ErrDamaged.
type damagedError struct{ err error }

func (e damagedError) Error() string   { return e.err.Error() }
func (e damagedError) Unwrap() []error { return []error{store.ErrDamaged, e.err} }

func damaged(err error) error { return damagedError{err} }

// check reads the database at the URI old (read only): an automator's,
// and, by SQLite's integrity_check, damaged (rep's Problems and Found,
// lines its lines, for blame), or ErrWhole.
func check(ctx context.Context, old, name string, rep *RebuildReport) (lines []string, err error) {
	db, err := sql.Open("sqlite", old)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, unreadableSchema(name, err)
	}
	defer conn.Close()
	tables, err := tableNames(ctx, conn)
	if err != nil {
		return nil, unreadableSchema(name, err)
	}
	if !IsAutomators(tables) {
		return nil, fmt.Errorf("%s is an SQLite database but not an automator's (it lacks the %s tables): %w", name, prose.And(store.MissingAutomatorTables(tables)), ErrNotAutomatorDB)
	}
	lines, err = checkLines(ctx, conn, "main", "integrity_check", MaxProblems)
	if err != nil {
		return nil, unreadableSchema(name, err)
	}
	if len(lines) == 0 {
		// SQLite's check does not see every index entry that disagrees
		// with its row (a stale entry of a partial index, which an index
		// page that lost a write leaves): each index is compared with its
		// table, both ways.
		if lines, err = staleEntries(ctx, conn, tables); err != nil {
			return nil, unreadableSchema(name, err)
		}
	}
	if len(lines) == 0 {
		return nil, ErrWhole
	}
	rep.Problems, rep.Found = lines[:min(len(lines), 10)], len(lines)
	return lines, nil
}

// staleEntries compares each index of tables (of the database conn has
// open as main) with the table's rows, both ways, under a partial index's
// condition, and says of each that disagrees, in integrity_check's words
// for an index's problem.
func staleEntries(ctx context.Context, conn *sql.Conn, tables []string) ([]string, error) {
	var lines []string
	for _, table := range tables {
		if strings.HasPrefix(table, "sqlite_") {
			continue
		}
		indexes, err := tableIndexes(ctx, conn, "main", table)
		if err != nil {
			return nil, err
		}
		t := quoteIdent(table)
		for _, ix := range indexes {
			cols, where := ix.columns(), ix.whereClause()
			fromIndex := fmt.Sprintf(`SELECT %s FROM %s INDEXED BY %s%s`, cols, t, quoteIdent(ix.name), where)
			fromTable := fmt.Sprintf(`SELECT %s FROM %s NOT INDEXED%s`, cols, t, where)
			var n int
			err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM (`+fromIndex+` EXCEPT `+fromTable+`) UNION ALL SELECT COUNT(*) FROM (`+fromTable+` EXCEPT `+fromIndex+`) ORDER BY 1 DESC LIMIT 1`).Scan(&n)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				lines = append(lines, fmt.Sprintf("%srows of table %s differ from their entries in index %s (SQLite's integrity_check does not see them all)", comparedPrefix, table, ix.name))
			}
		}
	}
	// A unit open in the table, and its indexes, that the audit log says
	// ended: pages rolled back together.
	if !slices.Contains(tables, "audit") {
		return lines, nil // a schema from before the audit log
	}
	var ended int
	err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM (`+endedOpenQuery("main", "main")+`)`).Scan(&ended)
	if err != nil {
		return nil, err
	}
	if ended > 0 {
		lines = append(lines, fmt.Sprintf("%s%d units of table work are queued or claimed that the audit log's work.ended events say ended", comparedPrefix, ended))
	}
	return lines, nil
}

// comparedPrefix begins the findings of staleEntries, which compares
// what SQLite's integrity_check does not: Rebuild compares them again
// (compareIndexes, endedInAudit), and blameTables passes them over.
const comparedPrefix = "compared with the rows: "

// compareIndexes reads, for table (copied into main), each index the
// damaged database old has of it (on columns alone, not expressions) that
// can still be read, and compares it with the rows copied, both ways
// (under a partial index's condition): a row an index lists that the copy
// lacks, or holds with other values, or one the copy holds that an index
// lacks. Each index is a copy of its columns of every row its condition
// takes, so where they disagree, either the table's pages lost or changed
// rows that read without an error (a page that lost a write: a unit
// finished and queued again), or the index's did; a file does not say
// which. So a disagreement is an error matching store.ErrDamaged, unless
// trustRows: the operator says the table is right. An index that cannot
// be read is passed over (it is damaged itself, and rebuilt). A table
// salvaged is compared on the rows copied alone: those lost are said
// apart.
func compareIndexes(ctx context.Context, conn *sql.Conn, table string, salvaged bool) (c comparison, err error) {
	indexes, err := tableIndexes(ctx, conn, "old", table)
	if err != nil {
		return c, err
	}
	t := quoteIdent(table)
	c = comparison{disputed: map[int64]bool{}, read: map[string]bool{}}
	for _, ix := range indexes {
		cols, where := ix.columns(), ix.whereClause()
		fromIndex := fmt.Sprintf(`SELECT %s FROM old.%s INDEXED BY %s%s`, cols, t, quoteIdent(ix.name), where)
		fromCopy := fmt.Sprintf(`SELECT %s FROM main.%s NOT INDEXED%s`, cols, t, where)
		var ids []int64
		c.read[ix.name] = true
		c.exists = append(c.exists, ix.name)
		for _, q := range []string{fromIndex + " EXCEPT " + fromCopy, fromCopy + " EXCEPT " + fromIndex} {
			only := ""
			if salvaged {
				// Rows a salvage lost are said as lost (keepLost): only
				// those copied are compared.
				only = ` WHERE rowid IN (SELECT rowid FROM main.` + t + `)`
			}
			more, err := rowids(ctx, conn, `SELECT rowid FROM (`+q+`)`+only)
			if err != nil {
				if store.IsDamaged(err) {
					ids, c.read[ix.name] = nil, false
					break
				}
				return c, fmt.Errorf("comparing table %s with its index %s: %w", table, ix.name, err)
			}
			ids = append(ids, more...)
		}
		if len(ids) > 0 {
			c.by = append(c.by, ix.name)
		}
		if c.read[ix.name] && ix.where == "" && slices.Contains(ix.cols, "state") {
			c.stateRead = true // every row's state, compared
		}
		for _, id := range ids {
			c.disputed[id] = true
		}
	}
	return c, nil
}

// comparison is what compareIndexes found of a table: the rowids of the
// rows its indexes list otherwise (disputed) and those indexes (by), and
// the indexes it compared in full (read).
type comparison struct {
	disputed map[int64]bool
	by       []string
	read     map[string]bool
	// exists lists the indexes of the table (read or not), and
	// stateRead says an index of every row holding its state was read in
	// full (the schema before the partial indexes of queued and claimed
	// units had such indexes).
	exists    []string
	stateRead bool
}

// endedInAudit adds to c.disputed the units the copy holds as queued or
// claimed that the damaged file's audit log says ended (work.ended, which
// is written in the transaction that ends a unit): the pages of the work
// table and of its indexes that would tell may have lost the same writes
// (a region of the disk rolled back), and agree. An audit log that
// cannot be read whole gives no such evidence.
func (c *comparison) endedInAudit(ctx context.Context, conn *sql.Conn) error {
	var audit int
	if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM old.sqlite_schema WHERE type = 'table' AND name = 'audit'`).Scan(&audit); err != nil || audit == 0 {
		return err // none in a schema from before the audit log
	}
	ids, err := rowids(ctx, conn, endedOpenQuery("main", "old"))
	if err != nil && !store.IsDamaged(err) {
		return fmt.Errorf("reading the audit log's ends of units: %w", err)
	}
	if len(ids) > 0 {
		c.by = append(c.by, "audit log's work.ended events")
	}
	for _, id := range ids {
		c.disputed[id] = true
	}
	return nil
}

// endedOpenQuery selects the rowids of the units the work table of the
// schema work holds as queued or claimed that the audit log of the schema
// audit says ended (work.ended): the audit log is read once, for those
// units alone.
func endedOpenQuery(work, audit string) string {
	return `SELECT rowid FROM ` + work + `.work NOT INDEXED WHERE state IN ('queued', 'claimed') AND id IN
		(SELECT work_id FROM ` + audit + `.audit NOT INDEXED WHERE kind = '` + store.AuditWorkEnded + `' AND work_id IN
			(SELECT id FROM ` + work + `.work NOT INDEXED WHERE state IN ('queued', 'claimed')))`
}

// ErrRowsDiffer is matched by Rebuild's refusal of a table whose rows
// its readable indexes list otherwise, or do not confirm: not a table
// whose rows cannot be read, which a salvage would keep.
var ErrRowsDiffer = errors.New("rows its indexes list otherwise, or do not confirm")

// differ refuses the rows c found disputed.
func (c comparison) differ() error {
	if len(c.disputed) == 0 {
		return nil
	}
	first := int64(-1)
	for id := range c.disputed {
		if first < 0 || id < first {
			first = id
		}
	}
	return damaged(fmt.Errorf("%d of its rows (rowid %d among them) differ between its pages and its %s %s: its pages lost or changed them, or those indexes did, which the file does not tell; if its rows are right, run repair again with --trust-rows%w", len(c.disputed), first, plural(len(c.by), "index", "indexes"), prose.And(c.by), silently(ErrRowsDiffer)))
}

// openUnconfirmed counts, for the work table, the units the copy holds as
// queued, and as claimed, that no index compared in full (read) confirms
// in that state. The queue's index (work_queued) confirms the queued
// units, so do the open units' (work_open_deadline) and the claimed
// units' (work_claimed) together: open, and not claimed; and the other
// way round for the claimed units. Where none can be read, an index page
// damaged beside a page of the table that lost a write would hide a unit
// that ran read back as queued, which would run again, or one that ended
// read back as claimed, its result lost.
func openUnconfirmed(ctx context.Context, conn *sql.Conn, c comparison) (queued, claimed int, missing []string, err error) {
	read := c.read
	q := c.stateRead || read["work_queued"] || (read["work_open_deadline"] && read["work_claimed"])
	cl := c.stateRead || read["work_claimed"] || (read["work_open_deadline"] && read["work_queued"])
	if !q {
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM main.work NOT INDEXED WHERE state = 'queued'`).Scan(&queued); err != nil {
			return 0, 0, nil, err
		}
	}
	if !cl {
		if err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM main.work NOT INDEXED WHERE state = 'claimed'`).Scan(&claimed); err != nil {
			return 0, 0, nil, err
		}
	}
	for _, ix := range []string{"work_queued", "work_open_deadline", "work_claimed"} {
		if !read[ix] && slices.Contains(c.exists, ix) {
			missing = append(missing, ix)
		}
	}
	return queued, claimed, missing, nil
}

// confirmOpen refuses, for the work table, units held as queued or
// claimed that no index that could be read confirms (openUnconfirmed).
func confirmOpen(ctx context.Context, conn *sql.Conn, c comparison) error {
	queued, claimed, missing, err := openUnconfirmed(ctx, conn, c)
	if err != nil || queued+claimed == 0 {
		return err
	}
	indexes := fmt.Sprintf("its %s %s, which would confirm them, cannot be read", plural(len(missing), "index", "indexes"), prose.And(missing))
	if len(missing) == 0 {
		indexes = "no index of it that holds their state could be read"
	}
	what := fmt.Sprintf("%d units queued", queued)
	switch {
	case queued == 0:
		what = fmt.Sprintf("%d units claimed", claimed)
	case claimed > 0:
		what += fmt.Sprintf(" and %d claimed", claimed)
	}
	return damaged(fmt.Errorf("%d of its rows are %s, and %s: a unit that ran, read back as queued from a page that lost a write, would run again, and one that ended, read back as claimed, lose its result; run repair again with --trust-rows to end the units read as queued that no index confirms, rather than run them%w", queued+claimed, what, indexes, silently(ErrRowsDiffer)))
}

// endDoubtful ends, as timed out, the units the copy holds as queued that
// an index lists otherwise (disputed) or that no index that could be read
// confirms as queued: with the rows trusted, none of them runs, as one may
// have run already. It returns the first of their ids (at most 20) and
// how many.
func endDoubtful(ctx context.Context, conn *sql.Conn, c comparison, now time.Time) ([]string, int, error) {
	queued, _, _, err := openUnconfirmed(ctx, conn, c)
	if err != nil {
		return nil, 0, err
	}
	ids := make([]int64, 0, len(c.disputed))
	for id := range c.disputed {
		ids = append(ids, id)
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, 0, err
	}
	which := `rowid IN (SELECT value FROM json_each(?))`
	if queued > 0 {
		which = `(? IS NOT NULL)` // every unit queued: none is confirmed
	}
	reason := fmt.Sprintf("ended by automator repair --trust-rows at %s: the database was damaged, and no index that could be read confirmed that it was still queued (its row may have been read back from a page that lost a write); ended rather than risk running it twice, so it may not have run", now.UTC().Format(time.RFC3339))
	rows, err := conn.QueryContext(ctx, `UPDATE main.work SET state = 'timed_out', finished_at = ?, reason = ? WHERE state = 'queued' AND `+which+` RETURNING id`, now.UnixNano(), reason, string(list))
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var names []string
	n := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, 0, err
		}
		if n++; len(names) < 20 {
			names = append(names, id)
		}
	}
	return names, n, rows.Err()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// rowids runs query, whose one column is a rowid, and returns them.
func rowids(ctx context.Context, conn *sql.Conn, query string) ([]int64, error) {
	rows, err := conn.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

type index struct {
	name  string
	cols  []string
	where string // a partial index's condition ("" for none)
}

// columns is what the index holds of each row, as a select list: its
// rowid and its columns.
func (ix index) columns() string {
	cols := "rowid"
	for _, c := range ix.cols {
		cols += ", " + quoteIdent(c)
	}
	return cols
}

// whereClause is " WHERE " and a partial index's condition, or "".
func (ix index) whereClause() string {
	if ix.where == "" {
		return ""
	}
	return " WHERE " + ix.where
}

// whereClause finds a partial index's condition in its SQL.
var whereClause = regexp.MustCompile(`(?is)\bWHERE\b(.*)$`)

// tableIndexes lists the indexes of table in schema (old, the damaged
// database) on its columns alone (no expression), with their columns and
// a partial index's condition. A table without rowids has none listed.
func tableIndexes(ctx context.Context, conn *sql.Conn, schema, table string) ([]index, error) {
	var withoutRowid bool
	if err := conn.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE schema = ? AND name = ?`, schema, table).Scan(&withoutRowid); err != nil {
		return nil, err
	}
	if withoutRowid {
		return nil, nil
	}
	type listed struct {
		name    string
		partial bool
		sql     sql.NullString
	}
	rows, err := conn.QueryContext(ctx, `SELECT l.name, l.partial, s.sql FROM pragma_index_list(?, ?) l
		LEFT JOIN `+quoteIdent(schema)+`.sqlite_schema s ON s.type = 'index' AND s.name = l.name ORDER BY l.name`, table, schema)
	if err != nil {
		return nil, err
	}
	var all []listed
	for rows.Next() {
		var l listed
		if err := rows.Scan(&l.name, &l.partial, &l.sql); err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []index
	for _, l := range all {
		ix := index{name: l.name}
		if l.partial {
			m := whereClause.FindStringSubmatch(l.sql.String)
			if m == nil {
				continue
			}
			ix.where = strings.TrimSpace(m[1])
		}
		rows, err := conn.QueryContext(ctx, `SELECT cid, COALESCE(name, '') FROM pragma_index_info(?, ?) ORDER BY seqno`, l.name, schema)
		if err != nil {
			return nil, err
		}
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
		if !expr {
			out = append(out, ix)
		}
	}
	return out, nil
}

// blameTables places each of integrity_check's findings on the damaged
// database old (attached to conn; its file is src) on the b-tree it is
// about: a table's (its pages, its rows' values, a table page no b-tree
// reaches), an index's, or the freelist's. Findings on tables, a table
// whose b-tree cannot be walked, and findings it cannot place are refused
// (a store.DamagedTablesError, or an error matching store.ErrDamaged):
// rows of those may be lost or changed, with no error when they are read.
// A table salvaged (salvaged(table)) is not refused, and, with salvage,
// neither are findings it cannot place: a salvage finds the rows lost by
// the indexes that list them.
func blameTables(ctx context.Context, conn *sql.Conn, findings []string, salvaged func(string) bool, salvage bool) error {
	type tree struct{ name, table, kind string }
	roots := map[int64]tree{1: {"sqlite_schema", "sqlite_schema", "table"}}
	rows, err := conn.QueryContext(ctx, `SELECT type, name, tbl_name, rootpage FROM old.sqlite_schema WHERE rootpage > 0`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var tr tree
		var root int64
		if err := rows.Scan(&tr.kind, &tr.name, &tr.table, &root); err != nil {
			rows.Close()
			return err
		}
		roots[root] = tr
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var refused *store.DamagedTablesError
	blame := func(table, why string) {
		if salvaged(table) {
			return
		}
		if refused == nil {
			refused = &store.DamagedTablesError{Err: errors.New(why)}
		}
		if !slices.Contains(refused.Tables, table) {
			refused.Tables = append(refused.Tables, table)
		}
	}
	// Which b-tree each page belongs to: every b-tree walked (dbstat). A
	// table's that cannot be walked has lost what lies past the damage.
	owner := map[int64]tree{}
	for _, tr := range roots {
		names := []any{tr.name}
		if tr.name == "sqlite_schema" {
			names = append(names, "sqlite_master")
		}
		q := `SELECT pageno FROM dbstat('old') WHERE name = ?`
		if len(names) == 2 {
			q = `SELECT pageno FROM dbstat('old') WHERE name IN (?, ?)`
		}
		pages, err := conn.QueryContext(ctx, q, names...)
		if err == nil {
			for pages.Next() {
				var p int64
				if err = pages.Scan(&p); err != nil {
					break
				}
				owner[p] = tr
			}
			pages.Close()
			if err == nil {
				err = pages.Err()
			}
		}
		// dbstat, walking a damaged b-tree of a file opened read only,
		// may also fail with other codes (an overflow page's damaged
		// chain: "database or disk is full"): those are the damage too.
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil && tr.kind == "table":
			blame(tr.table, fmt.Sprintf("its b-tree cannot be walked: %v", err))
		}
	}
	free, err := freelistPages(ctx, conn)
	if err != nil {
		return err
	}
	var unplaced []string
	// place puts finding f on the b-tree tr (ok: one was found for it).
	place := func(tr tree, ok bool, f string) {
		switch {
		case !ok:
			unplaced = append(unplaced, f)
		case tr.kind == "table":
			blame(tr.table, f)
		}
	}
	for _, f := range findings {
		switch {
		case strings.HasPrefix(f, stoppedPrefix):
			// Where SQLite stopped is said by the other findings, and by
			// the copy, which reads every table.
		case indexFinding.MatchString(f), strings.HasPrefix(f, comparedPrefix):
		case strings.Contains(strings.ToLower(f), "freelist"):
		default:
			if m := treeFinding.FindStringSubmatch(f); m != nil {
				root, _ := strconv.ParseInt(m[1], 10, 64)
				tr, ok := roots[root]
				place(tr, ok, f)
				continue
			}
			if m := valueFinding.FindStringSubmatch(f); m != nil {
				blame(strings.Trim(m[1], `"`), f)
				continue
			}
			if m := unusedFinding.FindStringSubmatch(f); m != nil {
				p, _ := strconv.ParseInt(m[1], 10, 64)
				// A table's page no b-tree reaches: its rows lost; unless
				// the freelist lists it (a freed page keeps what it held).
				if t, err := pageType(ctx, conn, p); !free[p] && (err != nil || t == 0x05 || t == 0x0d) {
					unplaced = append(unplaced, f)
				}
				continue
			}
			if m := pageFinding.FindStringSubmatch(f); m != nil {
				p, _ := strconv.ParseInt(m[1], 10, 64)
				tr, ok := owner[p]
				place(tr, ok, f)
				continue
			}
			unplaced = append(unplaced, f)
		}
	}
	if refused != nil {
		return refused
	}
	if len(unplaced) > 0 && !salvage {
		return damaged(fmt.Errorf("SQLite's integrity_check finds what may be rows lost or changed: %s", strings.Join(unplaced[:min(len(unplaced), 3)], "; ")))
	}
	return nil
}

// What integrity_check says, by what it is about.
var (
	// An index's: "row 12 missing from index work_queued", "wrong # of
	// entries in index audit_at", "non-unique entry in index …".
	indexFinding = regexp.MustCompile(`(?i)\b(missing from index|entries in index|entry in index)\b`)
	// A b-tree's, by its first page: "Tree 10 page 10 cell 0: …".
	treeFinding = regexp.MustCompile(`^Tree (\d+)\b`)
	// A table's values: "NULL value in work.state", "CHECK constraint
	// failed in work", "non-INTEGER value in work.key_id".
	valueFinding = regexp.MustCompile(`(?i)(?:value in|constraint failed in) ("?[A-Za-z_][A-Za-z0-9_]*"?)`)
	// A page no b-tree, nor the freelist, reaches.
	unusedFinding = regexp.MustCompile(`^Page (\d+)(?::| is) never used`)
	// A page's: "Fragmentation of 13 bytes reported as 0 on page 2", "On
	// tree page 5 cell 3: …".
	pageFinding = regexp.MustCompile(`(?i)\bpage (\d+)\b`)
)

// readPage reads page p of the attached database old as SQLite sees it
// (the write-ahead log's copy, where it has one).
func readPage(ctx context.Context, conn *sql.Conn, p int64) ([]byte, error) {
	var b []byte
	err := conn.QueryRowContext(ctx, `SELECT data FROM sqlite_dbpage('old') WHERE pgno = ?`, p).Scan(&b)
	return b, err
}

// pageType reads the type byte of page p of the attached database old:
// 0x02 and 0x0a an index's interior and leaf pages, 0x05 and 0x0d a
// table's.
func pageType(ctx context.Context, conn *sql.Conn, p int64) (byte, error) {
	b, err := readPage(ctx, conn, p)
	off := 0
	if p == 1 {
		off = sqliteHeaderSize
	}
	if err == nil && len(b) <= off {
		err = fmt.Errorf("page %d is short", p)
	}
	if err != nil {
		return 0, err
	}
	return b[off], nil
}

// freelistPages lists the pages the freelist of the attached database old
// names: its trunk pages and every page number their arrays hold, past
// the count a damaged trunk may say too (a page freed keeps what it held,
// its type byte among it).
func freelistPages(ctx context.Context, conn *sql.Conn) (map[int64]bool, error) {
	var pages int64
	if err := conn.QueryRowContext(ctx, `PRAGMA old.page_count`).Scan(&pages); err != nil {
		return nil, err
	}
	first, err := readPage(ctx, conn, 1)
	if err != nil {
		return nil, err
	}
	free := map[int64]bool{}
	if len(first) < 40 {
		return free, nil
	}
	be32 := func(b []byte) int64 { return int64(b[0])<<24 | int64(b[1])<<16 | int64(b[2])<<8 | int64(b[3]) }
	for trunk := be32(first[32:36]); trunk > 0 && trunk <= pages && !free[trunk]; {
		free[trunk] = true
		b, err := readPage(ctx, conn, trunk)
		if err != nil || len(b) < 8 {
			break
		}
		for off := 8; off+4 <= len(b); off += 4 {
			if p := be32(b[off : off+4]); p > 0 && p <= pages {
				free[p] = true
			}
		}
		trunk = be32(b[0:4])
	}
	return free, nil
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
// 10) and how many there were (at most 100).
func integrityCheck(ctx context.Context, conn *sql.Conn, schema, check string) ([]string, int, error) {
	lines, err := checkLines(ctx, conn, schema, check, 100)
	return lines[:min(len(lines), 10)], len(lines), err
}

// checkLines runs SQLite's check (integrity_check, or quick_check) on
// schema, stopping at max problems, and returns its lines that are not
// "ok". A check that SQLite itself stops, finding a page it cannot read
// past, says so in one more line.
func checkLines(ctx context.Context, conn *sql.Conn, schema, check string, max int) ([]string, error) {
	var lines []string
	rows, err := conn.QueryContext(ctx, fmt.Sprintf(`PRAGMA %s.%s(%d)`, schema, check, max))
	if err != nil {
		if store.IsDamaged(err) {
			return []string{stoppedPrefix + err.Error()}, nil
		}
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			return nil, err
		}
		if l == "ok" {
			continue
		}
		for part := range strings.SplitSeq(strings.TrimSpace(l), "\n") {
			if part = strings.TrimSpace(part); part != "" && !strings.HasPrefix(part, "***") {
				lines = append(lines, part)
			}
		}
	}
	if err := rows.Err(); err != nil {
		if !store.IsDamaged(err) {
			return nil, err
		}
		lines = append(lines, stoppedPrefix+err.Error())
	}
	return lines, nil
}

// stoppedPrefix begins checkLines' line for a check SQLite stopped.
const stoppedPrefix = "the check stopped: "

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
