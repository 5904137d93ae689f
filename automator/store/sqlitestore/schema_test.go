package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// queryPlan returns the details of EXPLAIN QUERY PLAN of query, one line per
// step.
func queryPlan(t *testing.T, q querier, query string, args ...any) []string {
	t.Helper()
	rows, err := q.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
	}
	return plan
}

// TestHotQueriesUseTheirIndexes: the claim, the expiry and the deadline
// queries run on every poll and every sweep; each must search the small
// index of open units meant for it (a partial index is used only when the
// query's WHERE implies the index's), never scan the work table nor sort.
// A listing of an open state reads that state's index too; across accounts
// it sorts the (few) open units. The instance listing groups an account's
// (few) claimed units by instance. A listing's next page (the keyset cursor
// BeforeQueuedAt, BeforeID) searches its index from the cursor on, by every
// filter whose index ends in (queued_at, id) after the filter's columns:
// a walk from the newest unit skipping those before the page got slower the
// deeper the page (a cursor written without a row value was planned so).
// The statistics of one account read its row alone.
func TestHotQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	s := open(t, filepath.Join(t.TempDir(), "automator.db"))
	type planCase struct {
		name, query, index string
		args               []any
		sorts              bool // a sort of the open units is expected
		// cursor: the index is searched from the cursor on, the step
		// reading it a SEARCH with "(queued_at,id)<(?,?)".
		cursor bool
	}
	// listing is the case of WorkList's statement for p, with its arguments.
	listing := func(name string, p store.WorkListParams, index string) planCase {
		q, args := workListQuery(p, "")
		return planCase{name: name, query: q, index: index, args: args}
	}
	// sorted is c with a sort of the open units expected.
	sorted := func(c planCase) planCase {
		c.sorts = true
		return c
	}
	// nextPage is the case of WorkList's statement for p's page after the
	// unit queued at testNow with id "w", of a tombstone when movingFrom is
	// not "": its index searched from the cursor on.
	nextPage := func(name string, p store.WorkListParams, movingFrom, index string, sorts bool) planCase {
		p.Limit, p.BeforeQueuedAt, p.BeforeID = 10, testNow, "w"
		q, args := workListQuery(p, movingFrom)
		return planCase{name: name, query: q, index: index, args: args, sorts: sorts, cursor: true}
	}
	for _, c := range []planCase{
		{"claim probe", claimProbeQuery, "work_queued", []any{"acme", 1}, false, false},
		{"claim candidates", claimCandidatesQuery, "work_queued", []any{"acme", 1, 4}, false, false},
		{"due work", dueWorkQuery, "work_open_deadline", []any{1, -1}, false, false},
		{"next deadline", nextDeadlineQuery, "work_open_deadline", nil, false, false},
		{"queued count", queuedCountQuery, "work_queued", []any{"acme", 10}, false, false},
		{"queued listing", listQuery(store.WorkListParams{Account: "acme", State: store.StateQueued, Limit: 10}), "work_queued", []any{"acme", "acme", 10}, false, false},
		{"units claimed by polls whose answers were lost", claimedByPollsQuery, "work_claimed", []any{"acme", "i", "r", 1, 2}, false, false},
		{"instance listing with the units each has in flight", instanceListQuery, "work_claimed", []any{"acme"}, true, false},
		{"claimed listing", listQuery(store.WorkListParams{Account: "acme", State: store.StateClaimed, Limit: 10}), "work_claimed", []any{"acme", "acme", 10}, false, false},
		// Across accounts an open state's index (account first) is read
		// whole, not from the cursor, and sorted: the open units are few.
		sorted(listing("queued listing of every account, next page", store.WorkListParams{State: store.StateQueued, Limit: 10, BeforeQueuedAt: testNow, BeforeID: "w"}, "work_queued")),
		sorted(listing("claimed listing of every account, next page", store.WorkListParams{State: store.StateClaimed, Limit: 10, BeforeQueuedAt: testNow, BeforeID: "w"}, "work_claimed")),
		// A listing of a rare ended state (not succeeded) reads the index of
		// those units, not every unit newest first until it has found enough.
		listing("failed listing", store.WorkListParams{Account: "acme", State: store.StateFailed, Limit: 10}, "work_account_unsuccessful"),
		listing("timed out listing, next page", store.WorkListParams{Account: "acme", State: store.StateTimedOut, Limit: 10, BeforeQueuedAt: testNow, BeforeID: "w"}, "work_account_unsuccessful"),
		listing("cancelled listing of every account", store.WorkListParams{State: store.StateCancelled, Limit: 10}, "work_unsuccessful"),
		listing("failed listing of every account, next page", store.WorkListParams{State: store.StateFailed, Limit: 10, BeforeQueuedAt: testNow, BeforeID: "w"}, "work_unsuccessful"),
		// The next page by every filter searches from the cursor on.
		nextPage("listing of every unit, next page", store.WorkListParams{}, "", "work_queued_at_id", false),
		nextPage("succeeded listing of every account, next page", store.WorkListParams{State: store.StateSucceeded}, "", "work_queued_at_id", false),
		nextPage("failed listing of every account, next page, from the cursor", store.WorkListParams{State: store.StateFailed}, "", "work_unsuccessful", false),
		nextPage("timed out listing of every account, next page", store.WorkListParams{State: store.StateTimedOut}, "", "work_unsuccessful", false),
		nextPage("cancelled listing of every account, next page", store.WorkListParams{State: store.StateCancelled}, "", "work_unsuccessful", false),
		nextPage("account listing, next page", store.WorkListParams{Account: "acme"}, "", "work_account_queued_at_id", false),
		nextPage("queued listing, next page", store.WorkListParams{Account: "acme", State: store.StateQueued}, "", "work_queued", false),
		nextPage("claimed listing, next page", store.WorkListParams{Account: "acme", State: store.StateClaimed}, "", "work_claimed", false),
		nextPage("succeeded listing, next page", store.WorkListParams{Account: "acme", State: store.StateSucceeded}, "", "work_account_queued_at_id", false),
		nextPage("failed listing, next page", store.WorkListParams{Account: "acme", State: store.StateFailed}, "", "work_account_unsuccessful", false),
		nextPage("timed out listing, next page, from the cursor", store.WorkListParams{Account: "acme", State: store.StateTimedOut}, "", "work_account_unsuccessful", false),
		nextPage("cancelled listing, next page", store.WorkListParams{Account: "acme", State: store.StateCancelled}, "", "work_account_unsuccessful", false),
		// A tombstone's listing reads both accounts' units (each from the
		// cursor on) and sorts them.
		nextPage("tombstone listing, next page", store.WorkListParams{Account: "deleted-acme"}, "acme", "work_account_queued_at_id", true),
	} {
		plan := queryPlan(t, s.read, c.query, c.args...)
		joined := strings.Join(plan, "; ")
		if !slices.ContainsFunc(plan, func(step string) bool { return strings.Contains(step+" ", " INDEX "+c.index+" ") }) {
			t.Errorf("%s: plan %q does not use %s", c.name, joined, c.index)
		}
		if strings.Contains(joined, "SCAN work ") && !c.sorts || strings.Contains(joined, "TEMP B-TREE") != c.sorts {
			t.Errorf("%s: plan %q scans the work table or sorts", c.name, joined)
		}
		if c.cursor && !slices.ContainsFunc(plan, func(step string) bool {
			return strings.HasPrefix(step, "SEARCH work USING INDEX "+c.index+" (") && strings.Contains(step, "(queued_at,id)<(?,?)")
		}) {
			t.Errorf("%s: plan %q does not search %s from the cursor on", c.name, joined, c.index)
		}
	}
	// The statistics of one account (its dashboard page, every refresh)
	// search the accounts by name and each of its counts by account: no
	// step scans a table, every account's or every unit's.
	q, args := accountStatsQuery(store.AccountStatsParams{OnlineSince: testNow, Account: "acme"})
	plan := queryPlan(t, s.read, q, args...)
	scansOrSorts := slices.ContainsFunc(plan, func(step string) bool {
		return strings.HasPrefix(step, "SCAN ") || strings.Contains(step, "TEMP B-TREE")
	})
	if !slices.Contains(plan, "SEARCH a USING INDEX sqlite_autoindex_accounts_1 (name=?)") || scansOrSorts {
		t.Errorf("account statistics of one account: plan %q does not search the account by name, or scans or sorts", strings.Join(plan, "; "))
	}
}

// listQuery returns the statement WorkList runs for p.
func listQuery(p store.WorkListParams) string {
	q, _ := workListQuery(p, "")
	return q
}

// atVersion makes a database whose schema is at version n and returns its
// path and a connection to fill it (the caller closes it).
func atVersion(t *testing.T, n int) (string, *sql.DB) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "automator.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateWith(t.Context(), db, migrations[:n]); err != nil {
		t.Fatalf("migrating to version %d: %v", n, err)
	}
	return path, db
}

// TestMigrationToOpenIndexes opens a database made by the schema before
// version 5 (claim and deadline indexes over every unit) and checks that the
// migration replaced those indexes and that every unit is still found where
// it belongs: claimable, expirable, listed by any state.
func TestMigrationToOpenIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, old := atVersion(t, 4)
	at := toNanos(testNow)
	for _, stmt := range []string{
		`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ('acme', x'01', 1, x'02', 0)`,
		`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline) VALUES
			('w-queued', 'acme', 'queued', 1, x'03', ?1, ?1 + 3600000000000),
			('w-late', 'acme', 'queued', 1, x'03', ?1 + 1, ?1 + 1000)`,
		`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, claimed_at, instance_id, claim_id) VALUES
			('w-claimed', 'acme', 'claimed', 1, x'03', ?1 + 2, ?1 + 2000, ?1 + 3, 'i-1', 'c-1')`,
		`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, finished_at) VALUES
			('w-succeeded', 'acme', 'succeeded', 1, x'03', ?1 + 3, ?1 + 3600000000000, ?1 + 4),
			('w-cancelled', 'acme', 'cancelled', 1, x'03', ?1 + 4, ?1 + 3600000000000, ?1 + 5)`,
	} {
		if _, err := old.ExecContext(ctx, stmt, at); err != nil {
			t.Fatalf("filling the version 4 database: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	if rows := migrationRows(t, s); len(rows) != len(migrations) {
		t.Fatalf("schema_migrations holds %d rows after migrating, want %d", len(rows), len(migrations))
	}
	var indexes []string
	rows, err := s.read.QueryContext(ctx, `SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'work' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, name)
	}
	rows.Close()
	want := []string{"work_account_idempotency_key", "work_account_queued_at_id", "work_account_unsuccessful", "work_claimed", "work_open_deadline", "work_queued", "work_queued_at_id", "work_unsuccessful"}
	if !slices.Equal(indexes, want) {
		t.Errorf("indexes of work after migrating = %v, want %v", indexes, want)
	}
	var check string
	if err := s.read.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check after migrating = %q, %v", check, err)
	}

	// The units already there are in the new indexes.
	stats, err := s.AccountStats(ctx, store.AccountStatsParams{})
	if err != nil || len(stats) != 1 || stats[0].Queued != 2 || stats[0].Claimed != 1 {
		t.Errorf("AccountStats after migrating = %+v, %v; want 2 queued and 1 claimed", stats, err)
	}
	for state, want := range map[store.State][]string{
		store.StateQueued:    {"w-late", "w-queued"},
		store.StateClaimed:   {"w-claimed"},
		store.StateSucceeded: {"w-succeeded"},
		store.StateCancelled: {"w-cancelled"},
	} {
		for _, account := range []string{"", "acme"} {
			got, err := s.WorkList(ctx, store.WorkListParams{Account: account, State: state, Limit: 10})
			var ids []string
			for _, w := range got {
				ids = append(ids, w.ID)
			}
			if err != nil || !slices.Equal(ids, want) {
				t.Errorf("WorkList(account %q, %s) after migrating = %v, %v; want %v", account, state, ids, err, want)
			}
		}
	}
	next, ok, err := s.WorkNextDeadline(ctx)
	if err != nil || !ok || !next.Equal(fromNanos(at+1000)) {
		t.Errorf("WorkNextDeadline after migrating = %v, %v, %v; want %v", next, ok, err, fromNanos(at+1000))
	}
	expired, err := s.WorkExpire(ctx, store.WorkExpireParams{Now: testNow.Add(time.Millisecond)})
	if err != nil || len(expired) != 2 || expired[0].ID != "w-late" || expired[1].ID != "w-claimed" {
		t.Errorf("WorkExpire after migrating = %v, %v; want w-late and w-claimed", expired, err)
	}
	claimed, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-2", Max: 4, ClaimIDs: []string{"c-2", "c-3", "c-4", "c-5"}, Now: testNow.Add(time.Millisecond)})
	if err != nil || len(claimed) != 1 || claimed[0].ID != "w-queued" {
		t.Errorf("WorkClaim after migrating = %v, %v; want w-queued", claimed, err)
	}
	if _, err := s.WorkComplete(context.Background(), store.WorkCompleteParams{ID: "w-queued", ClaimID: "c-2", State: store.StateSucceeded, SealedResult: []byte("r"), Now: testNow.Add(time.Millisecond)}); err != nil {
		t.Errorf("WorkComplete after migrating: %v", err)
	}
	if _, ok, err := s.WorkNextDeadline(ctx); err != nil || ok {
		t.Errorf("WorkNextDeadline with every unit finished = %v, %v; want none", ok, err)
	}
}

// TestMigrationToUnsuccessfulIndexes opens a database of version 9 holding
// units in every ended state and checks that version 10 added the listing
// indexes of the units that ended without success, holding the units
// already there: each listing by such a state reads its index and finds
// them all, newest first.
func TestMigrationToUnsuccessfulIndexes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, old := atVersion(t, 9)
	at := toNanos(testNow)
	for _, stmt := range []string{
		`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ('acme', x'01', 1, x'02', 0), ('globex', x'03', 1, x'02', 0)`,
		`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, finished_at) VALUES
			('a-failed-1', 'acme', 'failed', 1, x'03', ?1 + 1, ?1 + 100, ?1 + 50),
			('a-succeeded', 'acme', 'succeeded', 1, x'03', ?1 + 2, ?1 + 100, ?1 + 50),
			('g-failed', 'globex', 'failed', 1, x'03', ?1 + 3, ?1 + 100, ?1 + 50),
			('a-timed-out', 'acme', 'timed_out', 1, x'03', ?1 + 3, ?1 + 4, ?1 + 50),
			('a-cancelled', 'acme', 'cancelled', 1, x'03', ?1 + 4, ?1 + 100, ?1 + 50),
			('a-failed-2', 'acme', 'failed', 1, x'03', ?1 + 5, ?1 + 100, ?1 + 50),
			('g-cancelled', 'globex', 'cancelled', 1, x'03', ?1 + 6, ?1 + 100, ?1 + 50)`,
	} {
		if _, err := old.ExecContext(ctx, stmt, at); err != nil {
			t.Fatalf("filling the version 9 database: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	var check string
	if err := s.read.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check after migrating = %q, %v", check, err)
	}
	for _, c := range []struct {
		account string
		state   store.State
		index   string
		want    []string
	}{
		{"acme", store.StateFailed, "work_account_unsuccessful", []string{"a-failed-2", "a-failed-1"}},
		{"", store.StateFailed, "work_unsuccessful", []string{"a-failed-2", "g-failed", "a-failed-1"}},
		{"acme", store.StateTimedOut, "work_account_unsuccessful", []string{"a-timed-out"}},
		{"", store.StateCancelled, "work_unsuccessful", []string{"g-cancelled", "a-cancelled"}},
		{"globex", store.StateCancelled, "work_account_unsuccessful", []string{"g-cancelled"}},
	} {
		p := store.WorkListParams{Account: c.account, State: c.state, Limit: 10}
		q, args := workListQuery(p, "")
		if plan := strings.Join(queryPlan(t, s.read, q, args...), "; "); !strings.Contains(plan+" ", " INDEX "+c.index+" ") {
			t.Errorf("listing of account %q by %s after migrating: plan %q does not use %s", c.account, c.state, plan, c.index)
		}
		got, err := s.WorkList(ctx, p)
		var ids []string
		for _, w := range got {
			ids = append(ids, w.ID)
		}
		if err != nil || !slices.Equal(ids, c.want) {
			t.Errorf("WorkList(account %q, %s) after migrating = %v, %v; want %v", c.account, c.state, ids, err, c.want)
		}
	}
}

// TestMigrationToAuditWithoutAutoincrement opens a database of version 5
// holding audit events and checks that version 6 kept every event with its
// seq, that new events follow the largest seq, and that the log is still
// append-only.
func TestMigrationToAuditWithoutAutoincrement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, old := atVersion(t, 5)
	// Seqs 1, 2 and 7 (AUTOINCREMENT continues from sqlite_sequence).
	for _, seq := range []int{1, 2, 7} {
		if _, err := old.ExecContext(ctx, `INSERT INTO audit (seq, at, kind, detail) VALUES (?, ?, 'account.created', ?)`, seq, toNanos(testNow), fmt.Sprint("event ", seq)); err != nil {
			t.Fatalf("filling the version 5 database: %v", err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	var autoinc int
	if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'audit' AND sql LIKE '%AUTOINCREMENT%'`).Scan(&autoinc); err != nil || autoinc != 0 {
		t.Fatalf("audit still declared with AUTOINCREMENT (%d, %v)", autoinc, err)
	}
	e, err := s.AuditAppend(ctx, store.AuditEvent{At: testNow, Kind: store.AuditAccountCreated, Detail: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 8 {
		t.Errorf("the first event after the migration got seq %d, want 8 (after the largest, 7)", e.Seq)
	}
	events, err := s.AuditList(ctx, store.AuditListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Detail))
	}
	if want := []string{"1:event 1", "2:event 2", "7:event 7", "8:after"}; !slices.Equal(got, want) {
		t.Errorf("audit log after the migration: %v, want %v", got, want)
	}
	for _, stmt := range []string{`UPDATE audit SET detail = 'x' WHERE seq = 1`, `DELETE FROM audit WHERE seq = 1`} {
		err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
			_, err := tx.ExecContext(ctx, stmt)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s after the migration: %v, want it refused as append-only", stmt, err)
		}
	}
}
