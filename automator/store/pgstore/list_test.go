package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// listingUnits is how many units fillListings writes: w-1 to w-20000,
// queued 1 ms apart, of acme (even numbers) and globex (odd ones). Those
// whose number is 7, 8 or 9 modulo 999 failed, timed out or were
// cancelled, 10 and 11 are queued and claimed; the others succeeded.
const listingUnits = 20000

// fillListings writes the two accounts and their units with the columns of
// schema version 3 and later, and analyses the table, as autovacuum does.
func fillListings(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	for _, stmt := range []string{
		`INSERT INTO accounts (name, token_hash, key_id, sealed_key, created_at) VALUES ('acme', '\x01', 1, '\x02', $1), ('globex', '\x03', 1, '\x02', $1)`,
		`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, finished_at)
SELECT format('w-%s', i), CASE WHEN i % 2 = 0 THEN 'acme' ELSE 'globex' END,
	CASE i % 999 WHEN 7 THEN 'failed' WHEN 8 THEN 'timed_out' WHEN 9 THEN 'cancelled' WHEN 10 THEN 'queued' WHEN 11 THEN 'claimed' ELSE 'succeeded' END,
	1, '\x00', $1::timestamptz + i * interval '1 ms', $1::timestamptz + interval '1 hour', $1::timestamptz + interval '1 hour'
FROM generate_series(1, ` + fmt.Sprint(listingUnits) + `) i`,
		`ANALYZE work`,
	} {
		var args []any
		if strings.Contains(stmt, "$1") {
			args = append(args, testNow)
		}
		if _, err := pool.Exec(ctx, stmt, args...); err != nil {
			t.Fatalf("filling the work table: %v", err)
		}
	}
}

// listingWant is the ids of the units of fillListings that p lists.
func listingWant(p store.WorkListParams) []string {
	var want []string
	for i := listingUnits; i > 0 && len(want) < p.Limit; i-- {
		state := map[int]store.State{7: store.StateFailed, 8: store.StateTimedOut, 9: store.StateCancelled, 10: store.StateQueued, 11: store.StateClaimed}[i%999]
		if state == "" {
			state = store.StateSucceeded
		}
		account := map[bool]string{true: "acme", false: "globex"}[i%2 == 0]
		queued := testNow.Add(time.Duration(i) * time.Millisecond)
		if state == p.State && (p.Account == "" || p.Account == account) && (p.BeforeQueuedAt.IsZero() || queued.Before(p.BeforeQueuedAt)) {
			want = append(want, fmt.Sprintf("w-%d", i))
		}
	}
	return want
}

// sqlLiteral writes v, an argument of workListQuery, as an SQL literal.
func sqlLiteral(v any) string {
	switch v := v.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'::timestamptz"
	default:
		return fmt.Sprint(v)
	}
}

// checkStateListings checks that each listing by failed, timed_out or
// cancelled, of one account or of every account, first page or next,
// lists the units of fillListings it should, and that it reads the partial
// index of those units in its order (no sort), not every unit newest first
// until it has found enough; and that a listing by queued or claimed reads
// an index of the open units (and sorts those few). It must, both in the
// plan made for the statement's arguments and in the generic plan that
// PostgreSQL may use for a prepared statement after five runs, made
// without them.
func checkStateListings(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	plan := func(q string, args ...any) string {
		t.Helper()
		rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) "+q, args...)
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", q, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("EXPLAIN %s: %v", q, err)
		}
		return strings.Join(lines, "\n")
	}
	before := testNow.Add(listingUnits / 2 * time.Millisecond)
	open := []string{"work_queued", "work_claimed", "work_open_deadline"}
	for _, c := range []struct {
		name    string
		p       store.WorkListParams
		indexes []string // the plan reads one of them
		sorts   bool     // a sort of the open units is expected
	}{
		{"failed listing", store.WorkListParams{Account: "acme", State: store.StateFailed, Limit: 3}, []string{"work_account_unsuccessful"}, false},
		{"timed out listing, next page", store.WorkListParams{Account: "globex", State: store.StateTimedOut, Limit: 3, BeforeQueuedAt: before, BeforeID: "w"}, []string{"work_account_unsuccessful"}, false},
		{"cancelled listing of every account", store.WorkListParams{State: store.StateCancelled, Limit: 3, WithoutSealed: true}, []string{"work_unsuccessful"}, false},
		{"failed listing of every account, next page", store.WorkListParams{State: store.StateFailed, Limit: 3, BeforeQueuedAt: before, BeforeID: "w"}, []string{"work_unsuccessful"}, false},
		{"queued listing", store.WorkListParams{Account: "acme", State: store.StateQueued, Limit: 3}, open, true},
		{"claimed listing of every account, next page", store.WorkListParams{State: store.StateClaimed, Limit: 3, BeforeQueuedAt: before, BeforeID: "w"}, open, true},
	} {
		got, err := s.WorkList(ctx, c.p)
		var ids []string
		for _, w := range got {
			ids = append(ids, w.ID)
		}
		if want := listingWant(c.p); err != nil || !slices.Equal(ids, want) || len(ids) != c.p.Limit {
			t.Errorf("%s: WorkList = %v, %v; want %v, a whole page", c.name, ids, err, want)
		}

		q, args := workListQuery(c.p)
		literals := make([]string, len(args))
		for i, a := range args {
			literals[i] = sqlLiteral(a)
		}
		execute := "EXECUTE listing"
		if len(literals) > 0 {
			execute += "(" + strings.Join(literals, ", ") + ")"
		}
		if _, err := conn.Exec(ctx, "PREPARE listing AS "+q); err != nil {
			t.Fatalf("PREPARE %s: %v", q, err)
		}
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct{ kind, plan string }{
			{"plan", plan(q, args...)},
			{"generic plan", plan(execute)},
		} {
			reads := slices.ContainsFunc(c.indexes, func(index string) bool { return strings.Contains(p.plan, " using "+index+" on work") })
			if !reads || strings.Contains(p.plan, "Seq Scan") || strings.Contains(p.plan, "Sort") && !c.sorts {
				t.Errorf("%s: the %s does not read one of %v alone (in its order, if no sort is expected):\n%s", c.name, p.kind, c.indexes, p.plan)
			}
		}
		if _, err := conn.Exec(ctx, "RESET plan_cache_mode; DEALLOCATE listing"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListingsByStateUseTheirIndexes: the failed, timed out and cancelled
// units are few among the succeeded, and so are the open ones; listing
// them reads their indexes (checkStateListings).
func TestListingsByStateUseTheirIndexes(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	fillListings(t.Context(), t, s.pool)
	checkStateListings(t, s)
}

// TestMigrationToUnsuccessfulIndexes opens a schema of version 5 holding
// units in every ended state and checks that version 6 added the listing
// indexes of the units that ended without success, holding the units
// already there (checkStateListings).
func TestMigrationToUnsuccessfulIndexes(t *testing.T) {
	t.Parallel()
	dsn, old := atVersion(t, 5)
	fillListings(t.Context(), t, old)
	old.Close()
	checkStateListings(t, open(t, dsn))
}
