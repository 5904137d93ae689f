package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/opsgate/opsgate/automator/store"
)

// Salvaged lists the tables Rebuild may salvage (RebuildOptions.Salvage)
// when some of their rows cannot be read: a unit lost is kept as ended
// (keepLostRow), an audit event lost keeps its place (keepLostRow,
// auditGaps), an instance or a replica lost is listed again at its next
// poll or heartbeat. The others hold what no salvage can make up
// (accounts, their keys and tokens, API keys, ended dashboard sessions,
// the schema's version): a table of those whose rows are damaged is
// refused, and a backup is the way back.
var Salvaged = map[string]bool{"work": true, "audit": true, "instances": true, "replicas": true}

// LostRows says what Rebuild's salvage could not read of one table.
type LostRows struct {
	Table string
	// Rows counts the rows an index of the damaged file names that could
	// not be read; Known reports whether an index of every row was read
	// whole, so that no other row can have been lost.
	Rows  int
	Known bool
	// Named names the first of them (at most 20), as the indexes did:
	// "unit w-1 (account acme, claimed)", "event 1041", ...
	Named []string
	// Kept counts those kept in their place, ended (units) or as
	// audit.lost events.
	Kept int
	// Reserved says, for the audit table whose last pages could not be
	// read, the numbers kept for the events lost past the last one read
	// (auditGaps), or is "".
	Reserved string
}

// String says it in one phrase.
func (l LostRows) String() string {
	s := fmt.Sprintf("%d %s of table %s", l.Rows, plural(l.Rows, "row", "rows"), l.Table)
	if len(l.Named) > 0 {
		s += " (" + strings.Join(l.Named, ", ")
		if more := l.Rows - len(l.Named); more > 0 {
			s += fmt.Sprintf(" and %d more", more)
		}
		s += ")"
	}
	if l.Kept > 0 {
		switch l.Table {
		case "work":
			s += fmt.Sprintf(", %d of them kept as ended", l.Kept)
		case "audit":
			s += fmt.Sprintf(", %d of them kept in place as audit.lost events", l.Kept)
		}
	}
	if l.Reserved != "" {
		s += "; and " + l.Reserved
	} else if !l.Known {
		s += ", and how many more no index named is not known"
	}
	return s
}

// lostRow is what the readable indexes of the damaged file say of a row
// the table no longer gives: its columns' values, and the indexes that
// list it (a partial index lists only the rows its condition takes).
type lostRow struct {
	vals map[string]any
	in   []string
}

// salvageRows copies into main the rows of table (a rowid table) that can
// be read in old, around the pages that cannot: the table is read in
// rowid order until it fails, and again from the first rowid past the
// damage a seek reaches. It returns how many rows it copied, and whether
// nothing past the last damage could be read (tailLost: how many rows
// followed is not known).
func salvageRows(ctx context.Context, conn *sql.Conn, table string) (n int64, tailLost bool, err error) {
	cols, _, err := tableColumns(ctx, conn, table)
	if err != nil {
		return 0, false, err
	}
	t := quoteIdent(table)
	list := "rowid, " + strings.Join(cols, ", ")
	for lo := int64(math.MinInt64); ; {
		start, ok, err := firstFrom(ctx, conn, t, lo)
		damagedHere := store.IsDamaged(err)
		if damagedHere {
			start, ok, err = nextReadable(ctx, conn, t, lo)
		}
		if err != nil || !ok {
			// Nothing read past damage: the table's last rows are lost.
			return n, damagedHere && err == nil, err
		}
		last, count, scanErr := lastReadable(ctx, conn, t, start)
		if scanErr != nil && !store.IsDamaged(scanErr) {
			return n, false, scanErr
		}
		if count > 0 {
			m, err := copyRange(ctx, conn, t, list, start, count)
			n += m
			if err != nil {
				return n, false, err
			}
		} else {
			last = start // read by the seek, not by the scan: passed over
		}
		if scanErr == nil || last == math.MaxInt64 {
			return n, false, nil
		}
		lo = last + 1
	}
}

// copyRange copies into main the count rows of table t (its columns
// list) in old from rowid start, and returns how many it copied: by count,
// not up to the last rowid, as a range's end is found by reading the row
// past it, on the damaged page. A row that cannot be read whole (its
// overflow pages damaged) is passed over, the others copied one by one.
func copyRange(ctx context.Context, conn *sql.Conn, t, list string, start, count int64) (int64, error) {
	res, err := conn.ExecContext(ctx, fmt.Sprintf(`INSERT INTO main.%s (%s) SELECT %s FROM old.%s NOT INDEXED WHERE rowid >= ? ORDER BY rowid LIMIT ?`, t, list, list, t), start, count)
	if err == nil {
		return res.RowsAffected()
	}
	if isConstraint(err) {
		return 0, twoRows(t, err)
	}
	if !store.IsDamaged(err) {
		return 0, err
	}
	ids, err := rowids(ctx, conn, fmt.Sprintf(`SELECT rowid FROM old.%s NOT INDEXED WHERE rowid >= %d ORDER BY rowid LIMIT %d`, t, start, count))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, id := range ids {
		copied, err := copyRow(ctx, conn, t, list, id)
		if err != nil {
			return n, err
		}
		if copied {
			n++
		}
	}
	return n, nil
}

// copyRow copies into main the row of table t (its columns list) in old
// with rowid id, reached by a seek, and reports whether it did: not when
// the table has no such row, or it cannot be read.
func copyRow(ctx context.Context, conn *sql.Conn, t, list string, id int64) (bool, error) {
	res, err := conn.ExecContext(ctx, fmt.Sprintf(`INSERT INTO main.%s (%s) SELECT %s FROM old.%s NOT INDEXED WHERE rowid = ?`, t, list, list, t), id)
	switch {
	case err == nil:
		n, _ := res.RowsAffected()
		return n == 1, nil
	case isConstraint(err):
		return false, twoRows(t, err)
	case store.IsDamaged(err):
		return false, nil
	}
	return false, err
}

// isConstraint reports whether err is SQLite's refusal of a row that
// breaks a constraint.
func isConstraint(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT
}

// twoRows is salvage's error for table t read with two rows under one
// rowid: a page written where another belongs (a misdirected write),
// whose copies of rows the file does not tell from the right ones.
func twoRows(t string, err error) error {
	return damaged(fmt.Errorf("table %s reads with two rows under one rowid, or rows that break its constraints (a page written where another belongs?), and which is right the file does not tell: %w", t, err))
}

// firstFrom returns the first rowid of table t in old at or past lo.
func firstFrom(ctx context.Context, conn *sql.Conn, t string, lo int64) (int64, bool, error) {
	var id int64
	err := conn.QueryRowContext(ctx, `SELECT rowid FROM old.`+t+` NOT INDEXED WHERE rowid >= ? ORDER BY rowid LIMIT 1`, lo).Scan(&id)
	if err == sql.ErrNoRows {
		return 0, false, nil
	}
	return id, err == nil, err
}

// nextReadable finds, past lo, where a seek into table t of old reads
// again, lo's own seek having failed: rowids at doubling steps from lo
// (up to the largest), then halving back between the last that failed
// and the first that read. It returns the first rowid read from there.
func nextReadable(ctx context.Context, conn *sql.Conn, t string, lo int64) (int64, bool, error) {
	failed, x, step := lo, lo, int64(1)
	for {
		x = addSat(x, step)
		id, ok, err := firstFrom(ctx, conn, t, x)
		switch {
		case err == nil:
			for x-failed > 1 {
				mid := failed + (x-failed)/2
				mid2, ok2, err := firstFrom(ctx, conn, t, mid)
				switch {
				case err == nil:
					x, id, ok = mid, mid2, ok2
				case store.IsDamaged(err):
					failed = mid
				default:
					return 0, false, err
				}
			}
			return id, ok, nil
		case !store.IsDamaged(err):
			return 0, false, err
		case x == math.MaxInt64:
			return 0, false, nil // nothing past the damage can be read
		}
		failed = x
		step = addSat(step, step)
	}
}

// addSat is a+b, b ≥ 0, at most math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// lastReadable reads the rowids of table t in old from start, in order,
// and returns the last it read (start-1 for none), how many it read, and
// the error that stopped it, if one did.
func lastReadable(ctx context.Context, conn *sql.Conn, t string, start int64) (last, count int64, err error) {
	last = start - 1
	rows, err := conn.QueryContext(ctx, `SELECT rowid FROM old.`+t+` NOT INDEXED WHERE rowid >= ? ORDER BY rowid`, start)
	if err != nil {
		return last, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return last, count, err
		}
		last = max(last, id) // a page written where another belongs reads out of order
		count++
	}
	return last, count, rows.Err()
}

// recoverListed reads, for table, the rows every readable index of old
// lists that main lacks, and copies each one the table still gives (a
// rowid seek reaches pages a scan in order may have passed over). The
// others are lost: what the indexes said of them is returned by rowid,
// with whether an index of every row was read whole.
func recoverListed(ctx context.Context, conn *sql.Conn, table string) (lost map[int64]*lostRow, known bool, err error) {
	indexes, err := tableIndexes(ctx, conn, "old", table)
	if err != nil {
		return nil, false, err
	}
	cols, _, err := tableColumns(ctx, conn, table)
	if err != nil {
		return nil, false, err
	}
	t := quoteIdent(table)
	lost = map[int64]*lostRow{}
	for _, ix := range indexes {
		sel := ix.columns()
		cond := ""
		if ix.where != "" {
			cond = "(" + ix.where + ") AND "
		}
		rows, err := conn.QueryContext(ctx, fmt.Sprintf(`SELECT %s FROM old.%s INDEXED BY %s WHERE %srowid NOT IN (SELECT rowid FROM main.%s)`, sel, t, quoteIdent(ix.name), cond, t))
		if err != nil {
			if store.IsDamaged(err) {
				continue
			}
			return nil, false, err
		}
		for rows.Next() {
			vals := make([]any, 1+len(ix.cols))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err = rows.Scan(ptrs...); err != nil {
				break
			}
			id, _ := vals[0].(int64)
			l := lost[id]
			if l == nil {
				l = &lostRow{vals: map[string]any{}}
				lost[id] = l
			}
			for i, c := range ix.cols {
				l.vals[c] = vals[1+i]
			}
			l.in = append(l.in, ix.name)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		switch {
		case err == nil && ix.where == "":
			known = true
		case err != nil && !store.IsDamaged(err):
			return nil, false, err
		}
	}
	list := "rowid, " + strings.Join(cols, ", ")
	for id := range lost {
		copied, err := copyRow(ctx, conn, t, list, id)
		if err != nil {
			return nil, false, err
		}
		if copied {
			delete(lost, id)
		}
	}
	return lost, known, nil
}

// keepLost writes into main, for table, what stands in for its rows lost
// (Salvaged), and says what was lost.
func keepLost(ctx context.Context, conn *sql.Conn, table string, lost map[int64]*lostRow, known bool, now time.Time) (LostRows, error) {
	rep := LostRows{Table: table, Known: known}
	ids := make([]int64, 0, len(lost))
	for id := range lost {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		l := lost[id]
		name, err := keepLostRow(ctx, conn, table, id, l, now)
		if err != nil {
			return rep, err
		}
		if _, reserved := l.vals[reservedAfter]; reserved {
			rep.Reserved = name.text
			continue
		}
		rep.Rows++
		if name.kept {
			rep.Kept++
		}
		if len(rep.Named) < 20 {
			rep.Named = append(rep.Named, name.text)
		}
	}
	return rep, nil
}

type lostName struct {
	text string
	kept bool
}

// keepLostRow writes what stands in for row id of table, lost, and names
// it.
func keepLostRow(ctx context.Context, conn *sql.Conn, table string, id int64, l *lostRow, now time.Time) (lostName, error) {
	str := func(c string) string { s, _ := l.vals[c].(string); return s }
	num := func(c string) (int64, bool) { n, ok := l.vals[c].(int64); return n, ok }
	switch table {
	case "work":
		unit, account := str("id"), str("account")
		// Ended as timed out, as a restore ends the units open in it: its
		// result will never come, and it may have run. A state an index
		// kept it in, ended already otherwise, stays.
		state, was := store.StateTimedOut, "last seen ended, or its state not known"
		switch s := store.State(str("state")); {
		case s == store.StateFailed || s == store.StateTimedOut || s == store.StateCancelled:
			state, was = s, "last seen "+string(s)
		case slices.Contains(l.in, "work_claimed"):
			was = "last seen claimed: its script may have run"
		case slices.Contains(l.in, "work_queued"):
			was = "last seen queued"
		}
		if account == "" {
			// No index that still reads kept its account: nothing to keep
			// it under.
			return lostName{text: fmt.Sprintf("unit at rowid %d, its account not known", id)}, nil
		}
		var about []string
		if unit == "" {
			// Its id is lost with it, but not its account, nor perhaps its
			// idempotency key, which a retry would reuse: kept under an id
			// of its own, so the key stays taken.
			unit = fmt.Sprintf("w_lost_%d", id)
			about = append(about, "its id not known")
		}
		about = append(about, "account "+account)
		// A queue time not known is the repair's: the idempotency key is
		// kept for its retention from now, not taken as long expired.
		queued, ok := num("queued_at")
		if !ok || queued <= 0 {
			queued = now.UnixNano()
		}
		deadline, ok := num("deadline")
		if !ok || deadline < queued {
			deadline = queued
		}
		var key any
		if k, ok := l.vals["idempotency_key"].(string); ok {
			key = k
			about = append(about, "key "+k)
		}
		about = append(about, strings.TrimPrefix(was, "last seen "))
		name := fmt.Sprintf("unit %s (%s)", unit, strings.Join(about, ", "))
		reason := fmt.Sprintf("lost: its row was damaged, and automator repair --salvage ended it at %s; its command and result are gone, and whether its script ran is not known (%s)", now.UTC().Format(time.RFC3339), was)
		_, err := conn.ExecContext(ctx, `INSERT INTO main.work (rowid, id, account, state, key_id, sealed_command, queued_at, deadline, finished_at, reason, idempotency_key)
			VALUES (?, ?, ?, ?, 0, x'', ?, ?, ?, ?, ?)`, id, unit, account, string(state), queued, deadline, max(now.UnixNano(), queued), reason, key)
		if err != nil {
			return lostName{}, fmt.Errorf("keeping unit %s, lost, as ended: %w", unit, err)
		}
		return lostName{text: name, kept: true}, nil
	case "audit":
		at, ok := num("at")
		when := "its time from the index audit_at"
		if guessed, _ := l.vals[guessedAt].(string); guessed != "" {
			when = guessed
		} else if !ok {
			when = "its time not known"
		}
		_, err := conn.ExecContext(ctx, `INSERT INTO main.audit (seq, at, kind, detail) VALUES (?, ?, ?, ?)`,
			id, at, store.AuditLost, fmt.Sprintf("this event was lost: its row was damaged, and automator repair --salvage kept its place at %s (%s)", now.UTC().Format(time.RFC3339), when))
		if err != nil {
			return lostName{}, fmt.Errorf("keeping audit event %d, lost, in place: %w", id, err)
		}
		if after, ok := l.vals[reservedAfter].(int64); ok {
			return lostName{text: fmt.Sprintf("the events after %d, how many not known (their numbers kept, up to %d)", after, id), kept: true}, nil
		}
		return lostName{text: fmt.Sprintf("event %d", id), kept: true}, nil
	case "instances":
		return lostName{text: fmt.Sprintf("instance %s of account %s", str("instance_id"), str("account"))}, nil
	case "replicas":
		return lostName{text: "replica " + str("replica_id")}, nil
	}
	return lostName{text: fmt.Sprintf("rowid %d", id)}, nil
}

// guessedAt, among a lost row's values, says how its time was guessed;
// reservedAfter marks the audit.lost event that keeps the numbers past
// the last event read, and is that event's number.
const (
	guessedAt     = "\x00guessed at"
	reservedAfter = "\x00reserved after"
)

// auditGaps adds to gone, for the audit table salvaged into main, the
// events no index named whose numbers lie between two that were read (a
// purge deletes the oldest events only, so a number missing between two
// kept is an event lost, or, after the clock stepped back, one a purge
// deleted), each with the time of the event before it. When the table's
// last pages could not be read (tailLost) and no index of every event
// was, how many events were lost past the last one read is not known: the
// numbers past it, up to as many as the damaged file's pages could hold,
// are kept for them by one audit.lost event at the last of those numbers,
// so the events after the repair take numbers no event had.
func auditGaps(ctx context.Context, conn *sql.Conn, gone map[int64]*lostRow, tailLost bool) error {
	rows, err := conn.QueryContext(ctx, `SELECT seq, at FROM main.audit ORDER BY seq`)
	if err != nil {
		return err
	}
	type event struct{ seq, at int64 }
	var read []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.seq, &e.at); err != nil {
			rows.Close()
			return err
		}
		read = append(read, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i := 1; i < len(read); i++ {
		for seq := read[i-1].seq + 1; seq < read[i].seq; seq++ {
			if gone[seq] == nil {
				gone[seq] = &lostRow{vals: map[string]any{"at": read[i-1].at,
					guessedAt: "its time not known: that of the event before it; no index named it, and its number lay between two events read (or, after the clock stepped back, a purge had deleted it)"}}
			}
		}
	}
	if !tailLost {
		return nil
	}
	last := int64(0)
	if len(read) > 0 {
		last = read[len(read)-1].seq
	}
	at := int64(0)
	if len(read) > 0 {
		at = read[len(read)-1].at
	}
	for seq, l := range gone {
		if seq > last {
			last = seq
			if a, ok := l.vals["at"].(int64); ok {
				at = a
			}
		}
	}
	var pages, size int64
	if err := conn.QueryRowContext(ctx, `SELECT (SELECT page_count FROM pragma_page_count('old')), (SELECT page_size FROM pragma_page_size('old'))`).Scan(&pages, &size); err != nil {
		return err
	}
	// An event's row takes more than 32 bytes of a page.
	reserve := addSat(last, pages*(size/32))
	gone[reserve] = &lostRow{vals: map[string]any{"at": at, reservedAfter: last,
		guessedAt: fmt.Sprintf("the events after number %d could not be read, and how many there were is not known: their numbers, up to this one, are kept for them; its time is that of the last event read", last)}}
	return nil
}
